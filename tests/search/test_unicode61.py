"""The package's tokenizer (text/unicode61.py) is SQLite FTS5's `unicode61 remove_diacritics 2`, checked
against SQLite itself: every code point, alone and between letters, and the cases where full case
folding or a later Unicode would differ."""

from __future__ import annotations

import ast
import random
import unicodedata
from pathlib import Path

import pytest

from sessionsearch.text import cjk, unicode61

from ..fts5 import fts5_tokens

CODE_POINTS = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
CHUNK = 4096


def _differing(texts: list[str]) -> list[str]:
    """The texts whose tokens differ between the module and FTS5."""
    return [t for t, want in zip(texts, fts5_tokens(texts), strict=True) if unicode61.tokens(t) != want]


def test_every_code_point_alone_and_between_letters_tokenizes_as_fts5():
    """1,112,064 code points (all but the surrogates), each alone and between two letters: a space
    separates them within a row, so each is read as if it stood alone."""
    alone = [" ".join(map(chr, CODE_POINTS[i:i + CHUNK])) for i in range(0, len(CODE_POINTS), CHUNK)]
    between = [" ".join(f"a{chr(cp)}a" for cp in CODE_POINTS[i:i + CHUNK]) for i in range(0, len(CODE_POINTS), CHUNK)]
    bad = _differing(alone + between)
    if bad:  # name the code points
        cps = {ord(ch) for text in bad for ch in text if ch not in " a"}
        singles = [t for cp in sorted(cps) for t in (chr(cp), f"a{chr(cp)}a")]
        bad = [f"U+{ord(t[len(t) // 2]):04X}" for t in _differing(singles)]
    assert bad == []


def test_the_table_knows_three_kinds_of_code_point_and_one_character_folds():
    """Every code point starts a token, separates tokens, or is one of the diacritics that continue
    a token and fold to nothing; a token character folds to exactly one character."""
    assert len(unicode61.DIACRITICS) == 25 and all(0x300 <= ord(d) <= 0x331 for d in unicode61.DIACRITICS)
    assert all(len(unicode61.fold_char(chr(cp))) == 1 for cp in CODE_POINTS if unicode61.is_token_char(chr(cp)))
    assert [d for d in unicode61.DIACRITICS if unicode61.continues_token(d) is not True] == []


def test_whatever_str_split_takes_for_whitespace_is_a_separator_of_fts5():
    """tokens() splits the translated text with str.split: no token character may be whitespace to it."""
    assert [f"U+{cp:04X}" for cp in CODE_POINTS if len(f"a{chr(cp)}a".split()) > 1
            and unicode61.is_token_char(chr(cp))] == []


@pytest.mark.parametrize(("text", "want"), [
    ("straße STRASSE Straße", ["straße", "strasse", "straße"]),  # no full case folding: ß stays
    ("ΣΊΣΥΦΟΣ σίσυφος", ["σίσυφοσ", "σίσυφοσ"]),  # final sigma folds to σ; Greek accents stay
    ("ΐ ΰ", ["ΐ", "ΰ"]),  # no simple lower case of their own: kept, marks and all
    ("ﬁle ﬀ", ["ﬁle", "ﬀ"]),  # ligatures stay
    ("ႠႡ ⴀⴁ", ["ⴀⴁ", "ⴀⴁ"]),  # Georgian capitals fold to Nuskhuri (Python's lower() keeps them)
    ("हिन्दी", ["ह", "न", "द"]),  # Devanagari vowel signs and virama separate (Mn, Mc: not L* N* Co)
    ("বাংলা", ["ব", "ল"]),
    ("Café naïve İstanbul", ["cafe", "naive", "istanbul"]),  # İ is i, never i and a dot
    ("मराठी भाषा", ["मर", "ठ", "भ", "ष"]),
    ("v2_beta 3.14 it's", ["v2", "beta", "3", "14", "it", "s"]),
    ("😀 𝐁𝐨𝐥𝐝 ① Ⅻ ²", ["𝐁𝐨𝐥𝐝", "①", "ⅻ", "²"]),
    ("\U00010400\U00010428", ["\U00010428\U00010428"]),  # Deseret: the one astral case folding
])
def test_named_cases_tokenize_as_fts5_and_as_stated(text, want):
    assert unicode61.tokens(text) == fts5_tokens([text])[0] == want


def test_random_multi_script_text_tokenizes_as_fts5():
    rng = random.Random(26)
    alphabet = [chr(c) for c in [*range(0x20, 0x250), *range(0x300, 0x370), *range(0x370, 0x400), *range(0x900, 0x9FF),
                                 *range(0x10A0, 0x1100), *range(0x3040, 0x3100), *range(0xFB00, 0xFB07), 0x1F600,
                                 0x1D401, 0xE000, 0x200B, 0xFF21, 0xFF76, 0xFF9E, 0xAC00, 0xF900, 0x2160, 0xB2, 0x130,
                                 0xE0101, 0x10400, 0x9FFF, 0x30000, 0x1E900]]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(20_000)]
    assert _differing(texts) == []
    # and the index form, with each CJK run shadowed (text/cjk.py), as both stores index it
    assert _differing([cjk.index_text(t) for t in texts]) == []


def test_cjk_run_characters_are_token_characters_unicode61_keeps_as_they_are():
    """The shadow tokens of a run (text/cjk.py) are unicode61 tokens as they stand, so a store may
    take them without tokenizing them again (store/postgres/lexemes.py)."""
    run_chars = [chr(cp) for lo, hi in cjk.RUN_RANGES for cp in range(lo, hi + 1)
                 if not 0xD800 <= cp <= 0xDFFF and cjk.runs(chr(cp)) == [chr(cp)]]
    assert len(run_chars) > 100_000
    assert [ch for ch in run_chars if not unicode61.is_token_char(ch) or unicode61.fold_char(ch) != ch] == []


def test_the_tables_are_sqlites_not_those_of_pythons_unicode():
    """Python's unicodedata is a later Unicode: the token characters it would give (L* N* Co) differ
    from SQLite's at thousands of code points, so the tables are read from SQLite, never derived."""
    differ = [cp for cp in CODE_POINTS
              if (unicodedata.category(chr(cp))[0] in "LN" or unicodedata.category(chr(cp)) == "Co")
              != unicode61.is_token_char(chr(cp))]
    assert len(differ) > 10_000
    sample = random.Random(6).sample(differ, 2000)
    assert [hex(cp) for cp, want in zip(sample, fts5_tokens([chr(cp) for cp in sample]), strict=True)
            if unicode61.tokens(chr(cp)) != want] == []


def test_the_text_rules_import_nothing_else_of_the_package():
    """sessionsearch/text is the bottom layer: store/, search/ and the rest import it, never the reverse."""
    folder = Path(cjk.__file__).parent
    imported = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                imported.add("." * node.level + (node.module or ""))
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
    assert {name for name in imported if name.startswith("..") or name.startswith("sessionsearch")} == set()
    assert imported <= {"__future__", "functools", "re", "unicodedata", ".unicode61", ".unicode61_table"}
