"""`recent` for a word from the newest rows a postings build kept of it (store/postgres/recent.py,
kept_ctes): the hits, their order and scores are exactly the window walk's on the same database,
before and after appends to old windows (older and newer than the kept rows), a rewind with its
reconciliation, a delete since the build, and scopes too narrow for the kept rows (the walk
answers those)."""

from __future__ import annotations

import random

import pytest

from sessionsearch.protocol import AppendParams, SessionRef
from sessionsearch.store.base import Match
from sessionsearch.store.postgres import postings_build, search

from ..helpers import chain, engine_at, leaf, msg

WORDS = ["loan", "bank", "car", "pay", "lorem", "loop", "lost", "bat", "banner", "band", "rate", "late"]
BASE = 1_700_000_000_000


@pytest.fixture
def small_kept(monkeypatch):
    """Words in 5 rows keep their 8 newest."""
    monkeypatch.setattr(postings_build, "RECENT_MIN_DOCS", 5)
    monkeypatch.setattr(postings_build, "RECENT_KEEP", 8)


async def _corpus(engine, sessions: int = 12, seed: int = 5, name: str = "s", base: int = BASE) -> None:
    """Sessions of 20 messages; sessions s and s + 4 share their timestamps (ties the order breaks
    by message id)."""
    rng = random.Random(seed)
    for s in range(sessions):
        texts = []
        for _ in range(20):
            words = [rng.choice(WORDS[:rng.randint(1, len(WORDS))]) for _ in range(rng.randint(1, 8))]
            texts.append((rng.choice(["user", "assistant"]), " ".join(words)))
        await engine.append(AppendParams(sessionKey=f"agent:main:{name}{s}", events=chain(f"{name}{s}m", texts, ts=base + (s % 4) * 1000)))


QUERIES = [Match(("loan",)), Match(("bank",)), Match(("car",)), Match(("late",)), Match(("rate",)),
           Match(("band",)), Match(("nothing",))]
COMMON = [Match(("loan",)), Match(("bank",)), Match(("car",))]  # in far more rows than kept


async def _same_both_ways(store, monkeypatch, *, limits=(1, 5, 25), queries=QUERIES, **scope) -> int:
    """Every query's `recent` hits and scores with the kept rows and by the walk alone are equal;
    how many searches the kept rows answered."""
    scope = {"include": None, "exclude": None, "role": None, **scope}
    before = store._dfs.recent_kept
    for match in queries:
        for k in limits:
            async with store.reader() as reader:
                got = await store.search_top(reader, match, k=k, order="recent", **scope)
            with monkeypatch.context() as m:
                m.setattr(search, "kept_word", lambda q: None)
                async with store.reader() as reader:
                    want = await store.search_top(reader, match, k=k, order="recent", **scope)
            assert got == want, (match, k, scope)
            assert [h[3] for h in got[2] if h[2]] == sorted((h[3] for h in got[2] if h[2]), reverse=True)
    return store._dfs.recent_kept - before


async def test_kept_newest_rows_answer_recent_exactly_as_the_walk(pg, small_kept, monkeypatch):
    async with engine_at(pg) as engine:
        await _corpus(engine)
        store = await engine.store("main")
        built = await store.optimize(min_docs=30, min_share=0.0)
        assert built["recent"]["count"] >= 10 and built["recent"]["rows"] >= 10 * 6
        assert await _same_both_ways(store, monkeypatch) >= 8
        assert await _same_both_ways(store, monkeypatch, role="assistant") >= 6
        # appends since the build: to an old window, older than every kept row, and a new
        # session, newer than all
        await engine.append(AppendParams(sessionKey="agent:main:s0", events=[msg("old1", "user", "loan bank car", "s0m20", ts=BASE - 5),
                                              msg("old2", "user", "loan loan late", "old1", ts=BASE - 4)]))
        assert await _same_both_ways(store, monkeypatch) >= 8
        await engine.append(AppendParams(sessionKey="agent:main:new", events=chain("nw", [("user", "loan bank"), ("assistant", "car late loan")],
                                                    ts=BASE + 10_000)))
        async with store.reader() as reader:
            hits = (await store.search_top(reader, Match(("loan",)), k=3, order="recent", include=None,
                                           exclude=None, role=None))[2]
        assert [h[2] for h in hits[:2]] == ["nw2", "nw1"]
        assert await _same_both_ways(store, monkeypatch) >= 8
        # a rewind, reconciled: rows the build counted are gone, the walk answers until a build
        await engine.append(AppendParams(sessionKey="agent:main:s4", events=[leaf("l1", "s4m20", "s4m2"), msg("x1", "user", "loan bank", "l1")]))
        await engine.reconcile_pending()
        assert await _same_both_ways(store, monkeypatch) == 0
        await store.optimize(min_docs=30, min_share=0.0)
        assert await _same_both_ways(store, monkeypatch) >= 8
        # a delete since the build
        await engine.delete(SessionRef(sessionKey="agent:main:s7"))
        assert await _same_both_ways(store, monkeypatch) == 0
        await store.optimize(min_docs=30, min_share=0.0)
        assert await _same_both_ways(store, monkeypatch) >= 8


async def test_scopes_too_narrow_for_the_kept_rows_take_the_walk(pg, small_kept, monkeypatch):
    async with engine_at(pg) as engine:
        await _corpus(engine)
        store = await engine.store("main")
        await store.optimize(min_docs=30, min_share=0.0)
        async with store.reader() as reader:
            old = [w[0] for w in await store.windows_of(reader, "agent:main:s0")]
            newest = [w[0] for w in await store.windows_of(reader, "agent:main:s3")]
        # the oldest session's rows are all older than the kept ones of common words: never
        # enough in scope (a word in fewer rows than kept is kept whole: it answers any scope)
        assert await _same_both_ways(store, monkeypatch, queries=COMMON, include=old) == 0
        assert await _same_both_ways(store, monkeypatch, queries=COMMON, until=BASE + 500) == 0
        assert await _same_both_ways(store, monkeypatch, queries=COMMON, since=BASE + 3000, limits=(25,)) == 0
        assert await _same_both_ways(store, monkeypatch, queries=COMMON, exclude=newest, limits=(25,)) == 0
        # k + 1 in scope among the kept rows: they answer
        assert await _same_both_ways(store, monkeypatch, queries=COMMON, since=BASE + 3000, limits=(1,)) == 3
        assert await _same_both_ways(store, monkeypatch, queries=COMMON, include=newest, limits=(1,)) >= 2


async def test_words_in_fewer_rows_than_kept_answer_from_every_row(pg, small_kept, monkeypatch):
    monkeypatch.setattr(postings_build, "RECENT_KEEP", 1000)  # every row of every word kept: no floor
    async with engine_at(pg) as engine:
        await _corpus(engine, sessions=4)
        store = await engine.store("main")
        await store.optimize(min_docs=30, min_share=0.0)
        # whatever the scope: every match is a candidate
        assert await _same_both_ways(store, monkeypatch, limits=(5, 200)) >= 6
        assert await _same_both_ways(store, monkeypatch, until=BASE + 500, limits=(5,)) >= 3


async def test_words_kept_among_the_newest_rows_only_answer_exactly(pg, small_kept, monkeypatch):
    """With a cutoff (the newest ~32 rows of 240), the kept rows are those newer than it, and a word
    with fewer than 8 there has the cutoff as its floor."""
    monkeypatch.setattr(postings_build, "RECENT_MIN_DOCS", 30)
    monkeypatch.setattr(postings_build, "RECENT_SPAN", 0.5)
    async with engine_at(pg) as engine:
        await _corpus(engine)
        # a word in 32 old rows and in 2 of the newest: its floor is the cutoff, 2 rows above it
        await engine.append(AppendParams(sessionKey="agent:main:zold", events=chain("zo", [("user", "zebra loan")] * 32, ts=BASE - 100_000)))
        await engine.append(AppendParams(sessionKey="agent:main:znew", events=chain("zn", [("user", "zebra"), ("user", "car")] * 2, ts=BASE + 5000)))
        store = await engine.store("main")
        built = await store.optimize(min_docs=30, min_share=0.0)
        async with store.reader() as reader:
            kept = dict(await reader.all("SELECT key, cut->>'floor' FROM ss_postings WHERE kind = 2"))
        assert len(kept) == built["recent"]["count"] >= 4 and all(f is not None for f in kept.values())
        assert await _same_both_ways(store, monkeypatch) >= 4
        assert await _same_both_ways(store, monkeypatch, role="user") >= 2
        assert kept["zebra"] is not None
        assert await _same_both_ways(store, monkeypatch, queries=[Match(("zebra",))], limits=(1,)) == 1
        assert await _same_both_ways(store, monkeypatch, queries=[Match(("zebra",))], limits=(5, 25)) == 0
        await engine.append(AppendParams(sessionKey="agent:main:new", events=chain("nw", [("user", "loan bank"), ("assistant", "car late loan")],
                                                    ts=BASE + 10_000)))
        assert await _same_both_ways(store, monkeypatch) >= 4
