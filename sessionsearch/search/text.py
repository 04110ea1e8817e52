"""Snippets and redaction: what of a hit's text leaves the service. The text rules they stand on
(tokens, folding, CJK runs, UTF-16 lengths) are sessionsearch/text's."""

from __future__ import annotations

import re
from functools import lru_cache

from ..text import cjk, unicode61
from ..text.unicode61 import is_token_char, tokens
from ..text.utf16 import cut_utf16, utf16_len

__all__ = ["fold", "fold_char", "match_position", "redact", "snippet", "term_pieces"]


@lru_cache(maxsize=65536)
def fold_char(ch: str) -> str:
    """One character as the index matches it: full-width and half-width forms as their usual ones
    (the index form, text/cjk.py), then folded as unicode61 folds it (text/unicode61.py)."""
    if cjk.needs_fold(ch):
        return unicode61.fold(cjk.fold(ch))
    return unicode61.fold_char(ch)


def fold(text: str) -> str:
    """`text` as the index matches it, character by character (fold_char)."""
    return "".join(fold_char(ch) for ch in text)


def term_pieces(word: str) -> list[str]:
    """The folded pieces of a query word a snippet looks for: each CJK run whole (found as a
    substring) and the tokens of the text around them (found as words)."""
    return [piece for kind, text in cjk.query_parts(word) for piece in ([text] if kind == "cjk" else tokens(text))]


def _is_run(term: str) -> bool:
    return cjk.runs(term) == [term]


def _find_term(folded: str, term: str, prefix: bool) -> int:
    """Start of the first whole-word (or word-prefix) occurrence of folded `term`, or -1."""
    start = 0
    while True:
        i = folded.find(term, start)
        if i < 0:
            return -1
        substring = _is_run(term)
        before_ok = i == 0 or not is_token_char(folded[i - 1]) or substring
        end = i + len(term)
        after_ok = prefix or end >= len(folded) or not is_token_char(folded[end]) or substring
        if before_ok and after_ok:
            return i
        start = i + 1


def _earliest(folded: str, terms: list[str], prefix_last: bool) -> int:
    """Start of the earliest occurrence of any term in folded text, or -1."""
    best = -1
    for n, term in enumerate(terms):
        pos = _find_term(folded, term, prefix_last and n == len(terms) - 1)
        if pos >= 0 and (best < 0 or pos < best):
            best = pos
    return best


def match_position(text: str, terms: list[str], prefix_last: bool = False) -> int:
    """Index in `text` of the earliest occurrence of any folded term (0 when none is found)."""
    if text.isascii() or not cjk.needs_fold(text):  # folded in C; one character each unless marks go
        folded = text.lower() if text.isascii() else unicode61.fold(text)
        if len(folded) == len(text):
            return max(_earliest(folded, terms, prefix_last), 0)
    folded_chars: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        f = fold_char(ch)
        folded_chars.append(f)
        index.extend([i] * len(f))
    best = _earliest("".join(folded_chars), terms, prefix_last)
    return index[best] if 0 <= best < len(index) else 0


def snippet(text: str, terms: list[str], *, max_units: int = 300, prefix_last: bool = False) -> str:
    """An excerpt centred on the first match, ends marked " … " where cut, within `max_units`.

    When the text is longer than `max_units` UTF-16 code units the result still fits: the markers
    are counted in, so a cut snippet is at most `max_units` units and ends (or starts) with "…".
    """
    text = " ".join(text.split())  # whitespace runs to one space (str.split and re agree on what is one)
    units = utf16_len(text)
    if units <= max_units:
        return text
    pos = match_position(text, terms, prefix_last)
    lead_marker, tail_marker = "… ", " …"
    budget = max_units - len(lead_marker) - len(tail_marker)
    before_units = budget // 3
    if units == len(text):  # no astral characters: one unit each
        start = max(0, pos - before_units)
    else:
        start, used = pos, 0
        while start > 0 and used < before_units:
            start -= 1
            used += 2 if ord(text[start]) > 0xFFFF else 1
    if start > 0:  # prefer to start at a word boundary if one is near
        space = text.find(" ", start, pos)
        if 0 <= space - start < 20:
            start = space + 1
    core = cut_utf16(text[start:], budget if start > 0 else budget + len(lead_marker))
    cut_end = start + len(core) < len(text)
    if cut_end and " " in core[-20:]:
        core = core[:core.rindex(" ")]
    out = core.strip()
    if start > 0:
        out = lead_marker + out
    if cut_end:
        out = out + tail_marker
    return out


_SECRET_PATTERNS = [
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 [REDACTED]"),
    (re.compile(r"(?i)\b((?:[A-Z0-9]+[_-])*(?:PASSWORD|PASSWD|PWD|SECRET|TOKEN|API[_-]?KEY|ACCESS[_-]?KEY|"
                r"PRIVATE[_-]?KEY|AUTH)(?:[_-][A-Z0-9]+)*)(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"), r"\1\2[REDACTED]"),
    (re.compile(r"\b(?:sk|pk|rk)-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{16,}\b"), "[REDACTED]"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "[REDACTED]"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"), "[REDACTED]"),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"), "[REDACTED]"),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), "[REDACTED]"),
]


def redact(text: str) -> str:
    """Mask API keys, bearer tokens and passwords in KEY=value forms."""
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text
