"""Lengths and cuts in UTF-16 code units, the unit of every bound the SPEC states on text."""

from __future__ import annotations


def utf16_len(text: str) -> int:
    """The length of `text` in UTF-16 code units (an astral character is two)."""
    if text.isascii():  # known to the string object: no pass over the text
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def cut_utf16(text: str, units: int) -> str:
    """The longest prefix of `text` within `units` UTF-16 code units (never half a surrogate pair)."""
    if len(text) <= units // 2:
        return text
    total = utf16_len(text)
    if total <= units:
        return text
    if total == len(text):  # no astral characters: one unit each
        return text[:units]
    used = 0
    for i, ch in enumerate(text):
        used += 2 if ord(ch) > 0xFFFF else 1
        if used > units:
            return text[:i]
    return text
