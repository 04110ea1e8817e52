"""The meaning index packed in blocks (store/packed.py) and the cold load of a search process
(search/vectors.py), on both stores: what a process starting cold holds equals the per-row
embeddings exactly, whatever was stored, deleted or re-embedded after the fold; a search that meets
a load still going answers at once with `indexing: true`, and the load goes on."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from sessionsearch.engine import Engine
from sessionsearch.protocol import AppendParams, SearchParams, SessionRef
from sessionsearch.search import meaning, vectors
from sessionsearch.search.vectors import AgentVectors, Vectors
from sessionsearch.store import packed

from ..helpers import chain, engine_at, ids, sql_rows
from .test_semantic_search import TOPICS, Renamed

MORE = [
    ("user", "Book a table for four at the Italian place on Saturday"),
    ("assistant", "The garden needs watering twice a week in the summer"),
    ("user", "Which flights leave for Lisbon on Monday morning"),
]


def _rows(held: AgentVectors) -> dict[int, tuple[int, float, bytes]]:
    live = np.flatnonzero(held.alive[:held.n])
    return {int(held.rid[i]): (int(held.ts[i]), float(held.scale[i]), held.vec[i].tobytes()) for i in live}


async def _held_both_ways(engine: Engine) -> tuple[AgentVectors, AgentVectors, int]:
    """The agent's vectors as a cold process loads them (blocks, then the changes since), and as
    read row by row from nothing; and how many rows came from the blocks."""
    store = await engine.store("main")
    embedder = await engine.embedder()
    assert embedder is not None
    async with store.reader() as reader:
        head = await store.meaning_head(reader, embedder.model)
        assert head.model_no is not None
        held, changes = await store.load_embeddings(reader, head.model_no, embedder.dimensions)
    async with store.reader() as reader:
        rows = await store.embedding_changes(reader, head.model_no, 0, 0)
    cold = AgentVectors.of(held, embedder.dimensions)
    cold.apply(changes)
    by_rows = AgentVectors(head.model_no, embedder.dimensions)
    by_rows.apply(rows)
    return cold, by_rows, len(held)


async def _fold_now(engine: Engine, monkeypatch) -> dict:
    monkeypatch.setattr(packed, "FOLD_MIN_ROWS", 1)
    monkeypatch.setattr(packed, "FOLD_SHARE", 10**9)
    folded = await (await engine.store("main")).fold_vectors()
    monkeypatch.setattr(packed, "FOLD_MIN_ROWS", 10**9)  # no fold by the embed jobs that follow
    assert folded is not None
    return folded


async def test_the_embed_job_folds_its_rows_into_blocks_once_enough_are_stored(backend, monkeypatch):
    monkeypatch.setattr(packed, "FOLD_MIN_ROWS", len(TOPICS))
    monkeypatch.setattr(packed, "BLOCK_ROWS", 4)
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", TOPICS[:5])))
        await engine.embed_pending()
        store = await engine.store("main")
        none_yet = await sql_rows(store, "SELECT count(*) FROM vec_blocks", "SELECT count(*) FROM ss_vec_blocks")
        assert none_yet == [(0,)]  # 5 rows stored: under the fold's minimum
        await engine.append(AppendParams(sessionKey="agent:main:b", events=chain("b", TOPICS[5:])))
        await engine.embed_pending()
        blocks = await sql_rows(store, "SELECT n FROM vec_blocks ORDER BY bno",
                                "SELECT n FROM ss_vec_blocks ORDER BY bno")
        assert blocks == [(4,), (4,), (2,)]
        cold, by_rows, from_blocks = await _held_both_ways(engine)
        assert from_blocks == len(TOPICS) and _rows(cold) == _rows(by_rows)
        assert await store.fold_vectors() is None  # nothing stored since: no fold due


async def test_a_cold_load_holds_what_the_rows_hold_after_stores_and_a_deletion(backend, monkeypatch):
    monkeypatch.setattr(packed, "BLOCK_ROWS", 3)
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", TOPICS)))
        await engine.append(AppendParams(sessionKey="agent:main:gone", events=chain("g", TOPICS[:4])))
        await engine.embed_pending()
        folded = await _fold_now(engine, monkeypatch)
        assert folded["rows"] == len(TOPICS) + 4
        # after the fold: rows stored, a session deleted (its embeddings go), more stored again
        await engine.append(AppendParams(sessionKey="agent:main:b", events=chain("b", MORE)))
        await engine.embed_pending()
        await engine.delete(SessionRef(sessionKey="agent:main:gone"))
        await engine.append(AppendParams(sessionKey="agent:main:c", events=chain("c", MORE[:1])))
        await engine.embed_pending()
        cold, by_rows, from_blocks = await _held_both_ways(engine)
        assert from_blocks == len(TOPICS) + 4
        assert _rows(cold) == _rows(by_rows) and len(_rows(cold)) == len(TOPICS) + len(MORE) + 1
        # folded again, the deletion and the new rows are in the blocks themselves, and the blocks
        # of the fold before are gone
        await _fold_now(engine, monkeypatch)
        cold, by_rows, from_blocks = await _held_both_ways(engine)
        assert from_blocks == len(TOPICS) + len(MORE) + 1 and _rows(cold) == _rows(by_rows)
        store = await engine.store("main")
        blocks = await sql_rows(store, "SELECT count(*) FROM vec_blocks", "SELECT count(*) FROM ss_vec_blocks")
        assert blocks == [(-(-from_blocks // 3),)]


async def test_a_fresh_process_answers_from_the_blocks_as_the_process_that_read_the_rows(backend, monkeypatch):
    async with engine_at(backend) as warm:
        await warm.append(AppendParams(sessionKey="agent:main:a", events=chain("a", TOPICS)))
        await warm.embed_pending()
        await _fold_now(warm, monkeypatch)
        await warm.append(AppendParams(sessionKey="agent:main:b", events=chain("b", MORE)))
        await warm.embed_pending()
        questions = ["what did we decide about the home loan", "dinner reservation this weekend",
                     "my computer runs out of charge", "travel to portugal"]
        before = [await warm.search(SearchParams(query=q, mode="semantic", limit=5)) for q in questions]
        async with engine_at(backend) as cold:
            after = [await cold.search(SearchParams(query=q, mode="semantic", limit=5)) for q in questions]
    assert after == before and all(ids(found) for found in after)
    assert ids(after[0])[:1] == ["a1"]


async def test_a_fold_of_another_model_is_not_used_and_the_new_model_is_folded_again(backend, monkeypatch):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", TOPICS)))
        await engine.embed_pending()
        await _fold_now(engine, monkeypatch)
        builtin = await engine.embedder()
    async with Engine(settings=backend.settings(), embedder=Renamed(builtin, "builtin:renamed_256")) as engine:
        stale = await engine.search(SearchParams(query="home loan", mode="semantic"))
        assert stale == {"results": [], "indexing": True}
        await engine.embed_pending()
        cold, by_rows, from_blocks = await _held_both_ways(engine)
        assert from_blocks == 0 and _rows(cold) == _rows(by_rows) and len(_rows(cold)) == len(TOPICS)
        await _fold_now(engine, monkeypatch)
        cold, by_rows, from_blocks = await _held_both_ways(engine)
        assert from_blocks == len(TOPICS) and _rows(cold) == _rows(by_rows)


async def test_a_search_meeting_a_load_still_going_answers_at_once_and_the_load_goes_on(backend, monkeypatch):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", TOPICS)))
        await engine.embed_pending()
        store = await engine.store("main")
        engine._vectors.clear()  # a process that holds none
        release = asyncio.Event()
        load = type(store).load_embeddings

        async def slow(self, reader, model_no, dims):
            await release.wait()
            return await load(self, reader, model_no, dims)

        monkeypatch.setattr(type(store), "load_embeddings", slow)
        monkeypatch.setattr(meaning, "LOAD_WAIT_S", 0.05)
        semantic = await engine.search(SearchParams(query="home loan", mode="semantic"))
        assert semantic == {"results": [], "indexing": True}
        hybrid = await engine.search(SearchParams(query="mortgage", mode="hybrid"))
        assert ids(hybrid) == ["a1"] and hybrid["indexing"] is True  # the keyword half answers
        release.set()
        for _ in range(100):
            held, _ = engine._vectors.slot(store)
            if held is not None:
                break
            await asyncio.sleep(0.02)
        found = await engine.search(SearchParams(query="what did we decide about the home loan", mode="semantic"))
        assert ids(found)[:1] == ["a1"] and "indexing" not in found


@pytest.mark.parametrize("budget_rows", [15])
async def test_a_process_holds_vectors_up_to_its_byte_budget_least_recently_searched_out(backend, budget_rows):
    async with engine_at(backend) as engine:
        for agent in ("a", "b", "c"):
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=chain(agent, TOPICS)))
        await engine.embed_pending()
        one_row = AgentVectors(1, 256)
        one_row._alloc(1)
        engine._vectors.max_bytes = budget_rows * one_row.nbytes
        for agent in ("a", "b", "a", "c"):
            found = await engine.search(SearchParams(query="home loan", mode="semantic", agentId=agent))
            assert ids(found)[:1] == [f"{agent}1"]
        kept = {store.agent_id for store, held in _held(engine._vectors)}
        assert kept == {"c"}  # 10 rows an agent: one agent fits the budget, the last searched
        engine._vectors.max_bytes = vectors.MAX_BYTES
        for agent in ("a", "b"):
            await engine.search(SearchParams(query="home loan", mode="semantic", agentId=agent))
        assert {store.agent_id for store, _ in _held(engine._vectors)} == {"a", "b", "c"}


def _held(v: Vectors) -> list:
    return [(e.store, e.held) for e in v._by_store.values() if e.held is not None]


async def test_closing_the_engine_cancels_a_load_still_going(backend, monkeypatch):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", TOPICS)))
        await engine.embed_pending()
        engine._vectors.clear()
        store = await engine.store("main")
        started = asyncio.Event()

        async def stuck(self, reader, model_no, dims):
            started.set()
            await asyncio.Event().wait()  # a load that would never end

        monkeypatch.setattr(type(store), "load_embeddings", stuck)
        monkeypatch.setattr(meaning, "LOAD_WAIT_S", 0.05)
        assert await engine.search(SearchParams(query="home loan", mode="semantic")) == {"results": [], "indexing": True}
        assert started.is_set()
        (task,) = [e.loading for e in engine._vectors._by_store.values() if e.loading is not None]
    assert task.cancelled()


async def test_two_folds_at_once_store_one_and_the_other_gives_up(backend, monkeypatch):
    monkeypatch.setattr(packed, "BLOCK_ROWS", 4)
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", TOPICS)))
        await engine.embed_pending()
        monkeypatch.setattr(packed, "FOLD_MIN_ROWS", 1)
        store = await engine.store("main")
        done = await asyncio.gather(store.fold_vectors(), store.fold_vectors())
        assert sorted(d is None for d in done) == [False, True]
        gens = await sql_rows(store, "SELECT gen, rows FROM vec_fold", "SELECT gen, rows FROM ss_vec_folds")
        assert gens == [(1, len(TOPICS))]
        cold, by_rows, from_blocks = await _held_both_ways(engine)
        assert from_blocks == len(TOPICS) and _rows(cold) == _rows(by_rows)


async def test_blocks_left_by_a_sqlite_fold_cut_short_are_let_go_by_a_later_fold(tmp_path, monkeypatch):
    import time

    from sessionsearch.store.sqlite import meaning as sqlite_meaning

    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", TOPICS)))
        await engine.embed_pending()
        store = await engine.store("main")
        # a fold cut short two hours ago, and one still writing now: the first is let go, not the second
        old, young = sqlite_meaning.new_stage(time.time() - 7200), sqlite_meaning.new_stage(time.time())

        def stage(w):
            with w.tx() as c:
                for s in (old, young):
                    sqlite_meaning.stage_blocks(c, s, [(0, (1, b"\0" * 8, b"\0" * 8, b"\0" * 4, b"\0" * 256))])
        await store._run(stage)
        await _fold_now(engine, monkeypatch)
        stages = await sql_rows(store, "SELECT DISTINCT stage FROM vec_blocks ORDER BY stage", "")
        (kept,) = await sql_rows(store, "SELECT stage FROM vec_fold", "")
        assert sorted(s for (s,) in stages) == sorted([young, kept[0]])
        cold, by_rows, from_blocks = await _held_both_ways(engine)
        assert from_blocks == len(TOPICS) and _rows(cold) == _rows(by_rows)
