"""Right after an ingest, before and after the background's due build: short prefix searches (and
one-word searches) give exactly the answers they give after a full `optimize`, on both stores."""

from __future__ import annotations

import random

import pytest

from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.store.postgres import postings_build as pg_postings_build
from sessionsearch.store.sqlite import prefixes as sqlite_prefixes
from sessionsearch.store.sqlite.prefixes import PrefixTop

from ..helpers import chain, engine_at

VOCAB = ["alpha", "alpine", "alps", "alto", "also", "album", "beta", "bet", "better", "cat", "cart", "dog", "alphabetic"]
# prefixes as the palette's last word is typed, one letter to eight
QUERIES = [{"query": q, "match": "prefix"} for q in ("a", "al", "alp", "alph", "alpha", "alphab", "alphabe", "alphabet",
                                                     "be", "bet", "bett", "bette", "ca", "do")] + [
    {"query": q} for q in ("alpha", "beta", "dog")]


@pytest.fixture
def small_prefixes(monkeypatch):
    """Prefixes built at a few hundred rows, with runs cut short; how often SQLite's prefix
    searches were answered from them."""
    monkeypatch.setattr(sqlite_prefixes, "MIN_DOCS", 20)
    monkeypatch.setattr(sqlite_prefixes, "CAP", 40)
    monkeypatch.setattr(pg_postings_build, "PREFIX_MIN_DOCS", 20)
    monkeypatch.setattr(pg_postings_build, "CAP", 40)
    calls = {"answered": 0}
    original = PrefixTop.top

    async def counting(self, *args, **kwargs):
        top = await original(self, *args, **kwargs)
        calls["answered"] += top is not None
        return top

    monkeypatch.setattr(PrefixTop, "top", counting)
    return calls


async def _ingest(engine, sessions: range, seed: int) -> None:
    rng = random.Random(seed)
    for s in sessions:
        texts = [("user" if i % 2 == 0 else "assistant",
                  " ".join(rng.choice(VOCAB) for _ in range(rng.choice([1, 2, 3, 5, 9, 20]))))
                 for i in range(30)]
        await engine.append(AppendParams(sessionKey=f"agent:main:s{s}", events=chain(f"s{s}m", texts, ts=1_000_000 + 1000 * (s % 3))))


async def _answers(engine) -> list[list[tuple[str, float]]]:
    out = []
    for body in QUERIES:
        for limit in (5, 25):
            found = await engine.search(SearchParams.of({**body, "limit": limit}))
            out.append([(h["messageId"], h["score"]) for h in found["results"]])
    return out


async def test_answers_right_after_an_ingest_equal_those_after_a_full_optimize(backend, small_prefixes):
    async with engine_at(backend, postings_min_docs=40) as engine:
        await _ingest(engine, range(0, 4), seed=1)
        store = await engine.store("main")
        assert await engine.postings_due() == {"main": "first"}
        await store.optimize(min_docs=40, incremental=True)  # built early in the ingest, as the background does
        await _ingest(engine, range(4, 16), seed=2)  # the rest arrives after that build
        right_after = await _answers(engine)
        why = (await engine.postings_due()).get("main")
        assert why is not None  # the background's next check builds
        await store.optimize(min_docs=40, incremental=True)
        after_due_build = await _answers(engine)
        assert await engine.postings_due() == {}
        if backend.kind == "sqlite":
            assert small_prefixes["answered"] > 0  # the due build's postings answered prefixes
        await engine.optimize(min_docs=40)
        after_full = await _answers(engine)
        assert all(after_full), "every query matches"
        assert right_after == after_full
        assert after_due_build == after_full
