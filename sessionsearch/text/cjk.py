"""The CJK token scheme every backend indexes and queries by (docs/cjk.md): folding, runs, and the
shadow tokens that make any substring of a run findable through a word index.

Text is folded first (`fold`): runs of the characters in FOLD_RANGES (CJK scripts, full-width and
half-width forms, CJK compatibility characters) are NFKC-normalized, so `Ｒｅｄｉｓ` reads `Redis` and
`ｶﾞｲﾄﾞ` reads `ガイド`; everything else is left to the word tokenizer (case, diacritics).

A run is a maximal sequence of Han, Hiragana, Katakana or Hangul letters or numbers (RUN_RANGES,
Unicode category L* or N*; punctuation such as `・` ends a run; every such character is a token
character of unicode61 that it keeps as it is, tests/test_unicode61.py). In the index form (`index_text`)
each run is replaced by its shadow: its overlapping bigrams in order, then its unigrams, as
space-separated words. A run's unigrams stand between its bigrams and the next run's, so a phrase of
bigrams never spans two runs. A query run of n >= 2 characters is the phrase of its n - 1 bigrams
(`query_parts`), one character its unigram: a phrase of consecutive bigrams matches exactly where the
run occurs as a substring of one indexed run.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from .unicode61 import has_token

# Han, Hiragana, Katakana, Hangul (with their extensions and compatibility blocks)
RUN_RANGES: tuple[tuple[int, int], ...] = (
    (0x1100, 0x11FF),    # Hangul Jamo
    (0x3005, 0x3007),    # 々 〆 〇
    (0x3021, 0x3029),    # Hangzhou numerals
    (0x3038, 0x303C),
    (0x3040, 0x309F),    # Hiragana
    (0x30A0, 0x30FF),    # Katakana
    (0x3130, 0x318F),    # Hangul Compatibility Jamo
    (0x31F0, 0x31FF),    # Katakana Phonetic Extensions
    (0x3400, 0x4DBF),    # CJK Extension A
    (0x4E00, 0x9FFF),    # CJK Unified Ideographs
    (0xA960, 0xA97F),    # Hangul Jamo Extended-A
    (0xAC00, 0xD7FF),    # Hangul Syllables, Jamo Extended-B
    (0xF900, 0xFAFF),    # CJK Compatibility Ideographs
    (0xFF66, 0xFFDC),    # half-width Katakana and Hangul (folded away, listed for safety)
    (0x1B000, 0x1B16F),  # Kana Supplement and Extended-A
    (0x20000, 0x3FFFF),  # CJK Extensions B onwards, Compatibility Supplement
)
# what `fold` NFKC-normalizes: the run scripts, CJK symbols, radicals, enclosed and compatibility
# forms, full-width and half-width forms
FOLD_RANGES: tuple[tuple[int, int], ...] = (
    (0x1100, 0x11FF), (0x2E80, 0x2FDF), (0x3000, 0x33FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
    (0xA960, 0xA97F), (0xAC00, 0xD7FF), (0xF900, 0xFAFF), (0xFE30, 0xFE4F), (0xFF00, 0xFFEF),
    (0x1B000, 0x1B16F), (0x20000, 0x3FFFF),
)


def _one_of(ranges: tuple[tuple[int, int], ...]) -> str:
    """A regular expression for one character in `ranges`: the Basic Multilingual Plane's in one
    class, which `re` compiles to a bitmap, the rest in another (one class of both is tested range
    by range, 10-20x slower on CJK text)."""
    def cls(spans: list[tuple[int, int]]) -> str:
        return "[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in spans) + "]"
    bmp = [(lo, min(hi, 0xFFFF)) for lo, hi in ranges if lo <= 0xFFFF]
    astral = [(max(lo, 0x10000), hi) for lo, hi in ranges if hi > 0xFFFF]
    return f"(?:{cls(bmp)}|{cls(astral)})" if astral else cls(bmp)


_FOLD_RUN = re.compile(_one_of(FOLD_RANGES) + "+")
_FOLD_CHAR = re.compile(_one_of(FOLD_RANGES))


@lru_cache(maxsize=1)
def _run_pattern() -> re.Pattern[str]:
    """RUN_RANGES less what is not a letter or number (compiled once, on first use: ~0.1 s)."""
    spans: list[tuple[int, int]] = []
    for lo, hi in RUN_RANGES:
        for cp in range(lo, hi + 1):
            if unicodedata.category(chr(cp))[0] in "LN":
                if spans and spans[-1][1] == cp - 1:
                    spans[-1] = (spans[-1][0], cp)
                else:
                    spans.append((cp, cp))
    return re.compile(_one_of(tuple(spans)) + "+")


@lru_cache(maxsize=1)
def _split_pattern() -> re.Pattern[str]:
    return re.compile(f"({_run_pattern().pattern})")


def split_runs(text: str) -> list[str]:
    """Already folded `text` cut at its runs: [between, run, between, …, run, between], the runs at
    the odd indexes (a word tokenizer such as unicode61 folds neither case nor marks inside them)."""
    return _split_pattern().split(text)


def fold(text: str) -> str:
    """`text` with its FOLD_RANGES runs NFKC-normalized (identical when it has none)."""
    return _FOLD_RUN.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)


def needs_fold(text: str) -> bool:
    """Whether `text` has a character `fold` or the shadow would change (ASCII text: at once)."""
    return not text.isascii() and _FOLD_CHAR.search(text) is not None


def runs(text: str) -> list[str]:
    """The CJK runs of already folded text, in order."""
    return _run_pattern().findall(text)


def shadow(run: str) -> str:
    """A run's shadow tokens: its bigrams in order, then its unigrams, space-separated."""
    return " ".join([run[i:i + 2] for i in range(len(run) - 1)] + list(run))


def index_text(text: str) -> str:
    """The form of a message's text that goes into the word index: folded, each run replaced by its
    shadow (with spaces around it, so Latin glued to CJK is a word of its own)."""
    if not needs_fold(text):
        return text
    return _run_pattern().sub(lambda m: f" {shadow(m.group())} ", fold(text))


def query_parts(word: str) -> list[tuple[str, str]]:
    """A query word as the parts that must all match, in order: ("cjk", run) for each run, matched
    as the phrase of `bigrams(run)`; ("word", text) for the folded text between runs, which the
    word tokenizer matches its usual way."""
    folded = fold(word)
    parts: list[tuple[str, str]] = []
    last = 0
    for m in _run_pattern().finditer(folded):
        if has_token(folded[last:m.start()]):
            parts.append(("word", folded[last:m.start()]))
        parts.append(("cjk", m.group()))
        last = m.end()
    if has_token(folded[last:]):
        parts.append(("word", folded[last:]))
    return parts


def bigrams(run: str) -> list[str]:
    """The tokens a query run is the phrase of: its overlapping bigrams, or its one character."""
    return [run[i:i + 2] for i in range(len(run) - 1)] or [run]

