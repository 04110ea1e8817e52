"""Text rules shared by search and history: folding, UTF-16 lengths, CJK, snippets, redaction."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from ..store import cjk


def utf16_len(text: str) -> int:
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


@lru_cache(maxsize=65536)
def fold_char(ch: str) -> str:
    """Case- and diacritic-folded form of one character (as unicode61 remove_diacritics 2 sees it),
    full-width and half-width forms as their usual ones (as the index folds them, store/cjk.py)."""
    if ch.isascii():
        return ch.lower()
    if cjk.needs_fold(ch) and (usual := cjk.fold(ch)) != ch:
        return "".join(fold_char(c) for c in usual)
    decomposed = unicodedata.normalize("NFD", ch)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def fold(text: str) -> str:
    return "".join(fold_char(ch) for ch in text)


def is_token_char(ch: str) -> bool:
    """Whether unicode61 keeps `ch` inside a token (letters, numbers, private use)."""
    if ch.isascii():
        return ch.isalnum()
    cat = unicodedata.category(ch)
    return cat[0] in "LN" or cat in ("Co", "Mn", "Mc")


def tokens(text: str) -> list[str]:
    """Folded tokens of `text`, split where unicode61 splits."""
    out, buf = [], []
    for ch in text:
        if is_token_char(ch):
            buf.append(fold_char(ch))
        elif buf:
            out.append("".join(buf))
            buf = []
    if buf:
        out.append("".join(buf))
    return [t for t in out if t]


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


def match_position(text: str, terms: list[str], prefix_last: bool = False) -> int:
    """Index in `text` of the earliest occurrence of any folded term (0 when none is found)."""
    lowered = text.lower()
    if len(lowered) == len(text):  # fast path: plain lower-casing finds the term where it stands
        best = -1
        for n, term in enumerate(terms):
            pos = _find_term(lowered, term, prefix_last and n == len(terms) - 1)
            if pos >= 0 and (best < 0 or pos < best):
                best = pos
        if best >= 0:
            return best
    folded_chars: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        f = fold_char(ch)
        folded_chars.append(f)
        index.extend([i] * len(f))
    folded = "".join(folded_chars)
    best = -1
    for n, term in enumerate(terms):
        pos = _find_term(folded, term, prefix_last and n == len(terms) - 1)
        if pos >= 0 and (best < 0 or pos < best):
            best = pos
    return index[best] if best >= 0 and best < len(index) else 0


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
