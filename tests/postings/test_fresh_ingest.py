"""Right after an ingest, before and after the background's due build: short prefix searches (and
one-word searches) give exactly the answers they give after a full `optimize`, on both stores."""

from __future__ import annotations

import asyncio
import random

import pytest

from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.store.postgres import postings_build as pg_postings_build
from sessionsearch.store.sqlite import postings_build as sqlite_postings_build
from sessionsearch.store.sqlite import prefixes as sqlite_prefixes
from sessionsearch.store.sqlite import store as sqlite_store
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


@pytest.mark.parametrize("writes_in_groups", [100, 3])
async def test_writes_during_a_build_leave_one_prefix_build_that_covers_them(tmp_path, small_prefixes, monkeypatch,
                                                                             writes_in_groups):
    """Rows arriving while a SQLite build reads its words (an ingest under way) do not make it
    build the prefixes again after every group of words: once the index stops growing (after the
    group that saw the last write), or once at the end of the pass, and that build covers them."""
    monkeypatch.setattr(sqlite_prefixes, "LOG_LIMIT", 10)  # a session's 30 rows leave the prefixes stale
    monkeypatch.setattr(sqlite_postings_build, "LOG_LIMIT", 10)
    monkeypatch.setattr(sqlite_store, "batches", lambda words: [[w] for w, _ in words])  # a group a word
    events: list[str] = []
    async with engine_at(tmp_path, postings_min_docs=40) as engine:
        await _ingest(engine, range(0, 8), seed=1)
        loop = asyncio.get_running_loop()
        sessions = iter(range(8, 8 + writes_in_groups))
        read_postings, read_prefixes = sqlite_store.read_postings, sqlite_store.read_prefixes

        def reading_words(path, batch):  # on the build's thread: a session written meanwhile
            events.append("words")
            if (s := next(sessions, None)) is not None:
                asyncio.run_coroutine_threadsafe(_ingest(engine, range(s, s + 1), seed=s), loop).result(timeout=60)
            return read_postings(path, batch)

        def reading_prefixes(path):
            events.append("prefixes")
            return read_prefixes(path)

        monkeypatch.setattr(sqlite_store, "read_postings", reading_words)
        monkeypatch.setattr(sqlite_store, "read_prefixes", reading_prefixes)
        store = await engine.store("main")
        await store.optimize(min_docs=40, min_share=0.0)
        groups = events.count("words")
        if writes_in_groups >= groups:  # rows came during every group: built once, at the end of the pass
            assert events == ["prefixes"] + ["words"] * groups + ["prefixes"]
        else:  # the index stopped growing: built after the first group that saw no write
            assert groups > writes_in_groups + 1, events
            assert events == (["prefixes"] + ["words"] * (writes_in_groups + 1) + ["prefixes"]
                              + ["words"] * (groups - writes_in_groups - 1))
        # the prefixes are usable (nothing due) and cover every row written during the build
        db = tmp_path / "agents" / "main.db"
        assert sqlite_postings_build.prefix_upkeep_at(db) is None
        small_prefixes["answered"] = 0
        during = await _answers(engine)
        assert small_prefixes["answered"] > 0
        monkeypatch.setattr(sqlite_store, "read_postings", read_postings)
        await engine.optimize(min_docs=40)
        assert during == await _answers(engine)
