"""SQLite FTS5's `unicode61 remove_diacritics 2` tokenizer, in Python: the one definition of a
token that both stores index and match by (SPEC §2).

FTS5's tokenizer reads one code point at a time, with its own tables of Unicode 6.1:
- a token is a run of token characters (FTS5's categories `L* N* Co`, as of Unicode 6.1: code
  points unassigned then count as token characters, marks such as Devanagari's vowel signs and
  virama do not); 25 combining diacritics (U+0300..U+0331) continue a token but start none;
- each character of a token is folded on its own, to one character or none: simple lower case
  (Basic Multilingual Plane and Deseret only; no full case folding, so `ß` stays `ß`, `ﬁ` stays
  `ﬁ`, a final `ς` stays `ς`, Georgian capitals stay capitals) and, in the BMP, the letter with its
  diacritics removed (`é` is `e`, `ΐ` stays `ΐ`); the 25 diacritics fold to nothing.

The tables (unicode61_table.py) are read from SQLite itself by scripts/unicode61_table.py, never
derived from Python's `unicodedata` (a later Unicode); tests/test_unicode61.py compares them with
the running SQLite at every code point, alone and between letters.

Folding with those tables is then one `str.translate`: a separator becomes a space, a diacritic
nothing, a folded character its fold. Splitting the result on whitespace gives FTS5's tokens:
dropping a diacritic is the same as FTS5's reading wherever it stands (it continues a token, or
stands beside a separator or at an end, where it splits nothing of its own), and every character
`str.split` takes for whitespace is a separator of FTS5's (tested).
"""

from __future__ import annotations

from functools import lru_cache

from .unicode61_table import DIACRITICS, FOLD_FROM, FOLD_TO, SEPARATORS


@lru_cache(maxsize=1)
def fold_table() -> dict[int, str | None]:
    """`str.translate` table of unicode61's folding: case, diacritics (removed), nothing else."""
    table: dict[int, str | None] = dict(zip(map(ord, FOLD_FROM), FOLD_TO, strict=True))
    table.update(dict.fromkeys(map(ord, DIACRITICS)))
    return table


@lru_cache(maxsize=1)
def split_table() -> dict[int, str | None]:
    """fold_table() with every separator a space: the tokens are then the translated text's words."""
    table: dict[int, str | None] = dict.fromkeys((cp for lo, hi in SEPARATORS for cp in range(lo, hi + 1)), " ")
    table.update(fold_table())
    return table


@lru_cache(maxsize=1)
def separators() -> frozenset[str]:
    return frozenset(chr(cp) for lo, hi in SEPARATORS for cp in range(lo, hi + 1))


def tokens(text: str) -> list[str]:
    """The tokens unicode61 remove_diacritics 2 makes of `text`, folded, in order."""
    return text.translate(split_table()).split()


def fold(text: str) -> str:
    """`text` with each character folded as unicode61 folds it inside a token (separators kept)."""
    return text.translate(fold_table())


@lru_cache(maxsize=65536)
def fold_char(ch: str) -> str:
    """One character folded as unicode61 folds it inside a token: one character, or none."""
    return ch.translate(fold_table())


def is_token_char(ch: str) -> bool:
    """Whether unicode61 starts or continues a token with `ch` (a letter, number or private use
    character as Unicode 6.1 had them, or a code point unassigned then)."""
    return ch not in separators() and ch not in DIACRITICS


def continues_token(ch: str) -> bool:
    """Whether unicode61 keeps `ch` in a token already begun (a token character or a diacritic)."""
    return ch not in separators()


def has_token(text: str) -> bool:
    """Whether unicode61 makes at least one token of `text`."""
    return any(is_token_char(ch) for ch in text)
