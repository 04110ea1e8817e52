"""PostgreSQL's postings of common words and short prefixes (store/postgres/postings.py): the
hits and scores are exactly those of scoring every matching row (the slow path, search.py),
before and after appends, rewinds with reconciliation, and deletes since the build; a build is
due when it pays off, and it waits for older writers without blocking any."""

from __future__ import annotations

import asyncio
import random

import psycopg
import pytest

from sessionsearch.protocol import AppendParams, SearchParams, SessionRef
from sessionsearch.store.base import Match
from sessionsearch.store.postgres import postings, postings_build, terms
from sessionsearch.store.postgres import search as pg_search

from ..helpers import chain, engine_at, leaf, msg

WORDS = ["loan", "bank", "car", "pay", "lorem", "loop", "lost", "bat", "banner", "band", "rate", "late"]


@pytest.fixture
def small_postings(monkeypatch):
    """Postings cut short everywhere (3 rows a run, 10 a term), built from 30 rows, and a count of
    the searches they answered and those they left to the slow path."""
    monkeypatch.setattr(postings_build, "CAP", 3)
    monkeypatch.setattr(postings_build, "KEEP", 10)
    monkeypatch.setattr(postings_build, "PREFIX_MIN_DOCS", 30)
    calls = {"answered": 0, "fell_back": 0}
    real = postings.postings_top

    async def counted(*args, **kwargs):
        found = await real(*args, **kwargs)
        calls["answered" if found is not None else "fell_back"] += 1
        return found
    monkeypatch.setattr(postings, "postings_top", counted)
    return calls


async def _corpus(engine, sessions: int = 12, seed: int = 5, name: str = "s") -> None:
    rng = random.Random(seed)
    for s in range(sessions):
        texts = []
        for _ in range(20):
            words = [rng.choice(WORDS[:rng.randint(1, len(WORDS))]) for _ in range(rng.randint(1, 14))]
            texts.append((rng.choice(["user", "assistant"]), " ".join(words)))
        await engine.append(AppendParams(sessionKey=f"agent:main:{name}{s}", events=chain(f"{name}{s}m", texts, ts=1_700_000_000_000 + s * 1000)))


QUERIES = [Match(("loan",)), Match(("bank",)), Match(("car",)), Match(("late",)), Match(("lo",), True),
           Match(("loa",), True), Match(("ban",), True), Match(("band",), True), Match(("ba",), True),
           # the palette's last word as typed: one letter, and five to eight
           Match(("l",), True), Match(("b",), True), Match(("banne",), True), Match(("banner",), True),
           Match(("lorem",), True)]


async def _same_both_ways(store, monkeypatch, *, role=None, include=None, limits=(1, 5, 25, 200)) -> int:
    """Every query's hits and scores from the postings path and from the slow path are equal; the
    hits compared."""
    compared = 0
    for match in QUERIES:
        for k in limits:
            async with store.reader() as reader:
                got = await store.search_top(reader, match, k=k, order="relevance", include=include, exclude=None,
                                             role=role)
            with monkeypatch.context() as m:
                async def never(*args, **kwargs):
                    return None
                m.setattr(postings, "postings_top", never)
                async with store.reader() as reader:
                    want = await store.search_top(reader, match, k=k, order="relevance", include=include,
                                                  exclude=None, role=role)
            assert got == want, (match, k, role, include)
            compared += len(want[2])
    return compared


async def test_postings_rank_exactly_as_scoring_every_row_after_appends_rewinds_and_deletes(
        pg, small_postings, monkeypatch):
    async with engine_at(pg) as engine:
        await _corpus(engine)
        store = await engine.store("main")
        built = await store.optimize(min_docs=30, min_share=0.0)
        assert "loan" in built["words"] and built["prefixes"]["count"] >= 3
        assert await _same_both_ways(store, monkeypatch) > 1000
        assert await _same_both_ways(store, monkeypatch, role="assistant", limits=(5,)) > 20
        async with store.reader() as reader:
            wids = [w[0] for w in await store.windows_of(reader, "agent:main:s3")]
        await _same_both_ways(store, monkeypatch, include=wids, limits=(5,))
        assert small_postings["answered"] >= 12
        # appends since the build: their rows are scored beside the postings
        await _corpus(engine, sessions=2, seed=9, name="more")
        await engine.append(AppendParams(sessionKey="agent:main:short", events=chain("sh", [("user", "loan loan loan"), ("user", "band")])))
        before = small_postings["answered"]
        await _same_both_ways(store, monkeypatch)
        assert small_postings["answered"] > before
        # a rewind, reconciled: rows the build counted are gone, the slow path answers until a build
        await engine.append(AppendParams(sessionKey="agent:main:s0", events=[leaf("l1", "s0m20", "s0m2"), msg("x1", "user", "loan bank", "l1")]))
        await _same_both_ways(store, monkeypatch)
        await engine.reconcile_pending()
        before = small_postings["answered"]
        await _same_both_ways(store, monkeypatch)
        assert small_postings["answered"] == before
        assert await store.postings_due(min_docs=30, grow_share=0.2) == "stale"
        await store.optimize(min_docs=30, min_share=0.0)
        await engine.delete(SessionRef(sessionKey="agent:main:s1"))
        await _same_both_ways(store, monkeypatch)
        await store.optimize(min_docs=30, min_share=0.0)
        before = small_postings["answered"]
        await _same_both_ways(store, monkeypatch)
        assert small_postings["answered"] > before


async def test_past_the_fresh_limit_searches_take_the_slow_path(pg, small_postings, monkeypatch):
    async with engine_at(pg) as engine:
        await _corpus(engine, sessions=6)
        store = await engine.store("main")
        await store.optimize(min_docs=30, min_share=0.0)
        monkeypatch.setattr(postings, "FRESH_LIMIT", 10)
        await _corpus(engine, sessions=1, seed=9, name="more")  # 20 rows since the build
        before = dict(small_postings)
        async with store.reader() as reader:
            await store.search_top(reader, Match(("loan",)), k=5, order="relevance", include=None, exclude=None,
                                   role=None)
        assert small_postings == {"answered": before["answered"], "fell_back": before["fell_back"] + 1}


async def test_a_build_is_due_first_then_when_stale_or_grown_never_during_a_backlog(pg, monkeypatch):
    async with engine_at(pg) as engine:
        await _corpus(engine, sessions=2)
        store = await engine.store("main")
        # too few rows yet, and the score bounds kept by the writes
        assert await store.postings_due(min_docs=1000, grow_share=0.2) is None
        assert await store.postings_due(min_docs=30, grow_share=0.2) == "first"
        await engine.append(AppendParams(sessionKey="agent:main:late", events=chain("lt", [("user", "loan")])), index=False)  # a backlog
        assert await store.postings_due(min_docs=30, grow_share=0.2) is None
        await engine.reconcile_pending()
        await store.optimize(min_docs=30, min_share=0.0)
        assert await store.postings_due(min_docs=30, grow_share=0.2) is None
        await _corpus(engine, sessions=1, seed=3, name="g")  # 20 rows: a fifth more
        assert await store.postings_due(min_docs=30, grow_share=0.2) == "grown"
        await store.optimize(min_docs=30, min_share=0.0)
        monkeypatch.setattr(postings_build, "PREFIX_FRESH_LIMIT", 20)
        await _corpus(engine, sessions=1, seed=4, name="h")
        assert await store.postings_due(min_docs=30, grow_share=10.0) == "stale"  # half the budget used
        built = await store.optimize(min_docs=30, min_share=0.0)
        status = dict(engine.backend.agent_status())["main"]  # the metrics' gauges
        assert (status["postings_usable"], status["postings_stale"]) == (len(built["words"]), 0)
        await engine.delete(SessionRef(sessionKey="agent:main:s0"))
        assert await store.postings_due(min_docs=30, grow_share=10.0) == "stale"  # rows it counted are gone
        status = dict(engine.backend.agent_status())["main"]
        assert (status["postings_usable"], status["postings_stale"]) == (0, len(built["words"]))


async def test_a_build_waits_for_older_writers_and_blocks_no_append(pg):
    async with engine_at(pg) as engine:
        await _corpus(engine, sessions=2)
        store = await engine.store("main")
        async with await psycopg.AsyncConnection.connect(pg.database_url) as older:
            await older.execute("SELECT txid_current()")  # a transaction holding an id, still open
            build = asyncio.create_task(store.optimize(min_docs=30, min_share=0.0))
            await asyncio.sleep(1.0)
            assert not build.done()  # waiting for the older transaction
            await asyncio.wait_for(engine.append(AppendParams(sessionKey="agent:main:s0", events=chain("new", [("user", "loan")], parent="s0m20"))), 5)
            await older.rollback()
        assert "loan" in (await asyncio.wait_for(build, 30))["words"]


async def test_a_build_by_another_process_is_used_once_the_terms_are_read_again(pg, small_postings, monkeypatch):
    """A web process learns of a worker's build from the list of postings terms it re-reads every
    TERMS_TTL_S; until then its searches take the slow path (exact, slower), never a wrong answer."""
    async with engine_at(pg) as web, engine_at(pg) as worker:
        await _corpus(web, sessions=6)
        store = await web.store("main")
        loan = Match(("loan",))

        async def search() -> tuple:
            async with store.reader() as reader:
                return await store.search_top(reader, loan, k=5, order="relevance", include=None, exclude=None,
                                              role=None)

        monkeypatch.setattr(pg_search, "TERMS_TTL_S", 3600.0)  # a build slower than 5 s on a loaded machine
        slow = await search()  # reads the terms: none yet
        await (await worker.store("main")).optimize(min_docs=30, min_share=0.0)
        assert await search() == slow and small_postings["answered"] == 0  # the list read before the build
        monkeypatch.setattr(pg_search, "TERMS_TTL_S", 0.0)
        assert await search() == slow and small_postings["answered"] == 1  # read again: the postings answer


STATS = ("SELECT dfs FROM ss_search_stats(%(ano)s, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, %(qs)s::text[], "
         "%(none)s::bigint[], %(none)s::bigint[], %(none)s::bigint[], %(none)s::numeric[], %(none)s::bigint[], "
         "%(keys)s::text[], %(limit)s)")
COUNTED = [("'loan'", "w:loan"), ("'bank'", "w:bank"), ("'lo':*", "p:lo"), ("'ban':*", "p:ban"), ("'l':*", "p:l"),
           ("'banne':*", "p:banne"), ("'loan' <-> 'bank'", None), ("'zebra'", "w:zebra")]


async def test_a_word_or_prefix_the_postings_hold_is_counted_from_them_exactly(pg, monkeypatch):
    """A phrase's document count, when the count a search kept no longer holds (after any write),
    comes from the postings of a word or prefix they hold: the build's count plus the rows written
    since that hold it (schema migration 10). It equals counting every row, after appends, a
    rewind, a delete; and it is the postings' (an inflated build count shows through) exactly while
    the build is usable, as postings.py uses them."""
    monkeypatch.setattr(postings_build, "PREFIX_MIN_DOCS", 30)
    async with engine_at(pg) as engine:
        await _corpus(engine)
        store = await engine.store("main")
        await store.optimize(min_docs=30, min_share=0.0)
        with psycopg.connect(pg.database_url, autocommit=True) as conn:
            def counts(limit: int = terms.FRESH_LIMIT) -> tuple[list[int], list[int]]:
                qs, keys = [q for q, _ in COUNTED], [k for _, k in COUNTED]
                got = conn.execute(STATS, {"ano": store.ano, "qs": qs, "keys": keys, "limit": limit,
                                           "none": [None] * len(qs)}).fetchone()[0]
                want = [conn.execute("SELECT count(*) FROM ss_index WHERE ano = %s AND tsv @@ %s::tsquery",
                                     (store.ano, q)).fetchone()[0] for q in qs]
                return got, want

            got, want = counts()
            assert got == want and min(want[:6]) > 30
            await _corpus(engine, sessions=2, seed=9, name="more")
            await engine.append(AppendParams(sessionKey="agent:main:short", events=chain("sh", [("user", "loan loan loan"), ("user", "band")])))
            got, want = counts()
            assert got == want
            conn.execute("UPDATE ss_postings SET docs = docs + 1000 WHERE ano = %s", (store.ano,))
            got, _ = counts()
            assert [g - w for g, w in zip(got, want)] == [1000] * 6 + [0, 0]  # from the postings
            assert counts(limit=10)[0] == want  # past the fresh limit: every row counted
            # a rewind, reconciled: rows the build counted are gone, so the build is not used
            await engine.append(AppendParams(sessionKey="agent:main:s0", events=[leaf("l1", "s0m20", "s0m2"), msg("x1", "user", "loan bank", "l1")]))
            await engine.reconcile_pending()
            got, want = counts()
            assert got == want
            await store.optimize(min_docs=30, min_share=0.0)
            await engine.delete(SessionRef(sessionKey="agent:main:s1"))
            got, want = counts()
            assert got == want
        # a search's scores are those of counting every row: recent and several words, after a write
        await engine.append(AppendParams(sessionKey="agent:main:late", events=chain("lt", [("user", "loan bank late")], ts=1_800_000_000_000)))
        searches = [dict(query="loan"), dict(query="loan", order="recent"), dict(query="bank late"),
                    dict(query="ba", match="prefix", order="recent"), dict(query="loan car", order="recent")]
        fast = [await engine.search(SearchParams.of({"limit": 10, **s})) for s in searches]
        await store.execute_write("DELETE FROM ss_postings_built")
        store._dfs = type(store._dfs)()
        assert fast == [await engine.search(SearchParams.of({"limit": 10, **s})) for s in searches]
