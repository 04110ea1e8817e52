"""Both stores take the same text and answer the same queries with the same hits (SPEC §2, tokens
are FTS5's `unicode61 remove_diacritics 2` for every script): a SQLite store and a PostgreSQL store
are given the same messages, and every query is asked of both."""

from __future__ import annotations

import asyncio
import itertools
import random
import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionsearch.protocol import AppendParams, SearchParams

from ..helpers import chain, engine_at, ids

KEY = "agent:main:parity"
LEXICON = [
    "Café", "CAFÉ", "naïve", "Ærøskøbing", "straße", "STRASSE", "Straße", "ǅemal", "İstanbul", "ıstanbul",
    "ΣΊΣΥΦΟΣ", "σίσυφος", "ΐ", "ΰλη", "Ἀθῆναι", "ﬁle", "ﬀ", "ﬃx", "ႠႡႢ", "ⴀⴁⴂ", "ქართული", "ᲥᲐᲠᲗᲣᲚᲘ",
    "हिन्दी", "भाषा", "देवनागरी", "मराठी", "महाराष्ट्र", "বাংলা", "ভাষা", "தமிழ்", "ગુજરાતી", "ਪੰਜਾਬੀ", "తెలుగు",
    "العربية", "مَرْحَبًا", "עִבְרִית", "ภาษาไทย", "русский", "ЁЛКА", "ёлка", "Հայերեն", "ᏣᎳᎩ", "ꮳꮃꭹ",
    "𐐀𐐨", "𝐁𝐨𝐥𝐝", "①②", "Ⅻ", "x²", "Ｒｅｄｉｓ", "ｶﾞｲﾄﾞ", "東京", "会議室", "한국어", "per-session", "v2_beta",
    "e\u0301cole", "école", "ÉCOLE", "a\u0308b", "ñ", "n\u0303", "Ω", "ω", "K", "ǆ", "ǅ", "Ǆ", "ſ", "s",
]


def variants(word: str) -> list[str]:
    """A word as a user might type it: as written, in other cases and normal forms, cut short."""
    forms = {word, word.upper(), word.lower(), word.casefold(), word.title(),
             unicodedata.normalize("NFD", word), unicodedata.normalize("NFKC", word)}
    forms |= {f[: len(f) // 2] for f in list(forms) if len(f) > 2}
    return sorted(f for f in forms if f.strip())


def corpus(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(LEXICON) for _ in range(rng.randint(1, 6))) for _ in range(n)]


async def _answers(engine, queries: list[str], match: str, key: str) -> list[list[str]]:
    out: list[list[str]] = []
    for i in range(0, len(queries), 8):
        result = await engine.search(SearchParams(queries=queries[i:i + 8], limit=25, match=match, sessionKeys=[key]))
        out += [sorted(ids(state)) for state in result["states"]]
    return out


async def _both(tmp_path, pg, texts: list[str], queries: list[str], key: str = KEY) -> dict[str, list]:
    """{match: [(query, SQLite's hits, PostgreSQL's hits)]} for the same messages on both stores."""
    events = chain(f"{key[-4:]}-", [("user", t) for t in texts])
    out: dict[str, list] = {}
    async with engine_at(tmp_path / "sqlite") as lite, engine_at(pg) as post:
        await lite.append(AppendParams(sessionKey=key, events=events))
        await post.append(AppendParams(sessionKey=key, events=events))
        for match in ("exact", "prefix"):
            a, b = await _answers(lite, queries, match, key), await _answers(post, queries, match, key)
            out[match] = list(zip(queries, a, b, strict=True))
    return out


async def test_every_script_answers_the_same_one_word_queries_on_both_stores(tmp_path, pg):
    texts = corpus(random.Random(2026), 40) + LEXICON  # each word alone too
    queries = sorted({v for word in LEXICON for v in variants(word)})
    assert len(queries) >= 250
    answers = await _both(tmp_path, pg, texts, queries)
    for match, rows in answers.items():
        assert sum(bool(a) for _, a, _ in rows) > 100, match  # most queries find something
        assert [(q, a, b) for q, a, b in rows if a != b] == [], match


async def test_words_the_tokenizers_used_to_split_differently_are_found_alike(tmp_path, pg):
    """The cases an audit found answered differently: ß against SS, Georgian capitals, ΐ, Devanagari
    and Bengali vowel signs, ligatures, final sigma. Each query's hits are FTS5's, on both stores."""
    texts = ["straße", "STRASSE", "ႠႡႢ", "ⴀⴁⴂ", "ΐ", "ι", "हिन्दी", "ह", "বাংলা", "ব", "ﬁle", "file", "ﬀ", "ff",
             "σίσυφος", "ΣΊΣΥΦΟΣ", "मराठी", "मर"]
    queries = ["straße", "strasse", "STRASSE", "ⴀⴁⴂ", "ႠႡႢ", "ΐ", "ι", "हिन्दी", "ह", "हि", "বাংলা", "ব", "ﬁle",
               "file", "ﬀ", "ff", "σίσυφος", "σίσυφοσ", "मराठी", "मर"]
    answers = await _both(tmp_path, pg, texts, queries)
    exact = {q: a for q, a, b in answers["exact"]}
    assert exact["strasse"] == ["rity-2"] and exact["straße"] == ["rity-1"]  # no full case folding
    assert exact["ⴀⴁⴂ"] == exact["ႠႡႢ"] == ["rity-3", "rity-4"]  # Georgian capitals fold
    assert exact["ΐ"] == ["rity-5"] and exact["ﬁle"] == ["rity-11"]  # kept as they are
    assert exact["ह"] == ["rity-7", "rity-8"]  # the vowel signs and virama split the word
    for match, rows in answers.items():
        assert [(q, a, b) for q, a, b in rows if a != b] == [], match


EXAMPLES = itertools.count()
SCRIPTS = st.sampled_from([
    (0x41, 0x7A), (0xC0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x530, 0x58F), (0x590, 0x5FF),
    (0x600, 0x6FF), (0x900, 0x9FF), (0xA00, 0xAFF), (0xB80, 0xBFF), (0xE00, 0xE7F), (0x10A0, 0x10FF),
    (0x13A0, 0x13FF), (0x1C80, 0x1CBF), (0x1E00, 0x1FFF), (0x2160, 0x2188), (0x3040, 0x30FF), (0x4E00, 0x4E40),
    (0xAB70, 0xABBF), (0xAC00, 0xAC40), (0xFB00, 0xFB06), (0xFF01, 0xFF9F), (0x10400, 0x1044F), (0x1D400, 0x1D4FF),
])
WORD = st.lists(SCRIPTS.flatmap(lambda r: st.characters(min_codepoint=r[0], max_codepoint=r[1],
                                                        blacklist_categories=("Cs",))), min_size=1, max_size=6
                ).map("".join)
TEXT = st.lists(WORD, min_size=1, max_size=6).map(" ".join)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(TEXT, min_size=1, max_size=12), extra=st.lists(WORD, max_size=6))
def test_random_multi_script_texts_get_the_same_hits_on_both_stores(tmp_path, pg, texts, extra):
    """Queries: each word of the texts, its case and normal forms and halves, and random words.
    Each example appends to a session of its own, on both stores, and searches only it."""
    n = next(EXAMPLES)
    words = sorted({w for t in texts for w in t.split()} | set(extra))
    queries = sorted({v for w in words for v in variants(w)})[:64]
    answers = asyncio.run(_both(tmp_path / str(n), pg, texts, queries, key=f"agent:main:p{n}"))
    for match, rows in answers.items():
        assert [(q, a, b) for q, a, b in rows if a != b] == [], match
