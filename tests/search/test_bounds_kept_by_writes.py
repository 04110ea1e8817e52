"""Score bounds kept by the writes (store/sqlite/bounds.py, store/postgres/bounds.py): agents just
written and still being written are bounded (none read whole or ranked first for being written),
and the bounds stay upper bounds: a search of every agent answers exactly as one that reads every
agent whole, before and after a fold."""

from __future__ import annotations

import math
import random
import sqlite3

from sessionsearch.protocol import AppendParams, SearchParams, SessionRef
from sessionsearch.search.query import parse_query
from sessionsearch.store.sqlite import SqliteBackend

from ..helpers import BASE_TS, engine_at, msg

AGENTS = [f"k{a:02d}" for a in range(14)]
VOCAB = ["loan", "loans", "loaner", "river", "Café", "CAFE", "naïve", "東京", "会議", "rate", "rates", "stone",
         "maple", "lane", "pad"]
QUERIES = [("loan", "exact"), ("loa", "prefix"), ("cafe", "exact"), ("river stone", "exact"), ("東京", "exact"),
           ("rat", "prefix"), ("maple la", "prefix"), ("naive", "exact")]


def _text(rnd: random.Random) -> str:
    return " ".join(rnd.choices(VOCAB, k=rnd.randint(1, 9)) * rnd.randint(1, 3))


async def _no_bounds(self, stores, match, deadline):
    return None


async def _write(engine, rnd: random.Random, round_: int, rows: int) -> None:
    """`rows` messages, one append each, to random agents (each agent's session `r<round>`)."""
    parents: dict[str, str | None] = {}
    for i in range(rows):
        agent = rnd.choice(AGENTS)
        mid = f"{agent}r{round_}n{i}"
        await engine.append(AppendParams(sessionKey=f"agent:{agent}:r{round_}", events=[msg(mid, "user", _text(rnd), parents.get(agent),
                                                             ts=BASE_TS + round_ * 10_000 + i)]))
        parents[agent] = mid


async def _same_as_read_whole(engine, monkeypatch) -> None:
    for query, match in QUERIES:
        for limit in (1, 5, 20):
            found = await engine.search(SearchParams(query=query, match=match, limit=limit))
            with monkeypatch.context() as m:  # every agent read whole, as without bounds
                m.setattr(type(engine.backend), "score_bounds", _no_bounds)
                assert await engine.search(SearchParams(query=query, match=match, limit=limit)) == found, (query, limit)


async def _bounded(engine) -> None:
    """Every agent holding a word has a finite bound for it: none is read whole for being written."""
    stores = [await engine.store(a) for a in AGENTS]
    for word in ("loan", "river", "cafe"):
        found = await engine.backend.score_bounds(stores, parse_query(word, prefix=False).match, math.inf)
        assert found is not None
        assert all(b.bound < math.inf for b in found), word


async def test_written_agents_are_bounded_and_answer_as_if_read_whole_before_and_after_a_fold(backend, monkeypatch):
    rnd = random.Random(40)
    async with engine_at(backend, search_agents_concurrency=3) as engine:
        await _write(engine, rnd, 0, 120)  # just written: never folded
        await _bounded(engine)
        await _same_as_read_whole(engine, monkeypatch)
        await engine.delete(SessionRef(sessionKey=f"agent:{AGENTS[0]}:r0"))  # rows deleted: their terms counted out
        await _write(engine, rnd, 1, 40)
        await _bounded(engine)
        await _same_as_read_whole(engine, monkeypatch)
        for agent in AGENTS:  # folded afresh from the index (as a store written before writes kept them)
            store = await engine.store(agent)
            if isinstance(engine.backend, SqliteBackend):
                with sqlite3.connect(store.path) as db:
                    db.execute("DELETE FROM meta WHERE key IN ('bounds_rows', 'bounds_tokens')")
            else:
                await engine.backend.db.tx(lambda conn: conn.execute(
                    "DELETE FROM ss_bounds_built WHERE ano = (SELECT ano FROM ss_agents WHERE agent_id = %s)", (agent,)))
            await store.fold_bounds()
        await _bounded(engine)
        await _same_as_read_whole(engine, monkeypatch)
        await _write(engine, rnd, 2, 40)  # and written again after the fold
        await _bounded(engine)
        await _same_as_read_whole(engine, monkeypatch)


def test_the_bounds_a_writer_keeps_are_those_a_fold_reads(tmp_path):
    """Without deletions the kept bounds are exact: the same terms, document counts, highest
    frequencies and shortest rows as a fold of the index reads."""
    import asyncio

    from sessionsearch.store.sqlite import bounds

    async def fill() -> object:
        rnd = random.Random(41)
        async with engine_at(tmp_path) as engine:
            await _write(engine, rnd, 0, 60)
            return await engine.store(AGENTS[1])

    store = asyncio.run(fill())
    with sqlite3.connect(store.path) as db:
        kept = sorted(db.execute("SELECT term, docs, max_tf, min_dl FROM term_bounds"))
        db.execute("DELETE FROM meta WHERE key IN ('bounds_rows', 'bounds_tokens')")
    folded = bounds.read_bounds(store.path)
    assert folded is not None and kept and sorted(folded.terms) == kept


def test_after_deletions_the_kept_terms_and_counts_are_a_folds_and_the_rest_still_bounds(tmp_path):
    """Rows deleted between writes: the kept terms and document counts stay exact (a term in no
    row left is gone), the highest frequencies and shortest rows at least as loose as a fold's."""
    import asyncio

    from sessionsearch.store.sqlite import bounds

    async def fill() -> object:
        rnd = random.Random(42)
        async with engine_at(tmp_path) as engine:
            await _write(engine, rnd, 0, 80)
            await engine.delete(SessionRef(sessionKey=f"agent:{AGENTS[1]}:r0"))
            await _write(engine, rnd, 1, 60)
            await engine.delete(SessionRef(sessionKey=f"agent:{AGENTS[1]}:r1"))
            await _write(engine, rnd, 2, 40)
            return await engine.store(AGENTS[1])

    store = asyncio.run(fill())
    with sqlite3.connect(store.path) as db:
        kept = {t: (docs, tf, dl) for t, docs, tf, dl in db.execute("SELECT term, docs, max_tf, min_dl FROM term_bounds")}
        db.execute("DELETE FROM meta WHERE key IN ('bounds_rows', 'bounds_tokens')")
    folded = bounds.read_bounds(store.path)
    assert folded is not None and kept
    assert {t: docs for t, docs, _, _ in folded.terms} == {t: v[0] for t, v in kept.items()}
    assert all(kept[t][1] >= tf and kept[t][2] <= dl for t, _, tf, dl in folded.terms)
