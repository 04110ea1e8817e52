"""Several processes writing one PostgreSQL database at once: appends to one session, new
sessions with a coalesced reconciliation, the steps of one import transaction, the GIN pending
list under reconciliation and appends, two reconcilers of one window, and migrations started
together. What only the PostgreSQL backend has; the shared behaviour tests run on it through
the `backend` fixture."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import psycopg

from sessionsearch.api.tools import call
from sessionsearch.indexer.reconcile import reconcile_window
from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.store.postgres import LATEST, arrays, migrate, schema_version
from sessionsearch.store.postgres.arrays import Int4Array, Int8Array, TextArray
from sessionsearch.store.postgres.migrate import MIGRATIONS
from sessionsearch.store.postgres.reconcile import ORPHANS, SLOT_LOCK
from sessionsearch.store.postgres.writer import DELETE_INDEX
from sessionsearch.transcript.events import parse_event

from ..helpers import chain, engine_at, msg, until
from ..services import create_pg_database, drop_pg_database, empty_pg_database

KEY = "agent:main:pg"


APPENDER = """
import asyncio, sys
from sessionsearch import AppendParams, Engine, Settings
url, proc, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
async def main():
    async with Engine("/nonexistent", settings=Settings(database_url=url)) as engine:
        for b in range(batches):
            events = [{"type": "message", "id": f"p{proc}-{b}-{i}", "timestamp": "2026-01-02T03:04:05Z",
                       "message": {"role": "user", "content": f"concurrent word{proc} batch{b}"}} for i in range(4)]
            await engine.append(AppendParams(sessionKey="agent:main:shared", events=events))
asyncio.run(main())
"""


async def test_processes_appending_to_one_session_lose_duplicate_and_reorder_nothing(pg):
    procs, batches = 3, 8
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:shared", events=[msg("first", "user", "start")]))
        runs = [subprocess.Popen([sys.executable, "-c", APPENDER, pg.database_url, str(p), str(batches)])
                for p in range(procs)]
        for run in runs:
            assert await asyncio.to_thread(run.wait, 120) == 0
        store = await engine.store("main")
        async with store.reader() as reader:
            (wid, _, _), = await store.windows_of(reader, "agent:main:shared")
            branch = await store.branch_rows(reader, wid)
        total = 1 + procs * batches * 4
        assert [r[0] for r in branch] == list(range(1, total + 1))  # seqs 1..n, no gap, no duplicate
        for p in range(procs):  # each process's rows in the order it sent them
            mine = [r[1] for r in branch if r[1].startswith(f"p{p}-")]
            assert mine == [f"p{p}-{b}-{i}" for b in range(batches) for i in range(4)]
        status = (await call(engine, "index.status", {}))["agents"][0]
        assert (status["messages"], status["indexedMessages"], status["backlog"]) == (total, total, 0)
        for p in range(procs):
            assert len((await engine.search(SearchParams(query=f"word{p}", limit=25)))["results"]) == 25


NEW_SESSIONS = """
import asyncio, sys
from sessionsearch import AppendParams, Engine, Settings
url, proc, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
async def main():
    async with Engine("/nonexistent", settings=Settings(database_url=url)) as engine:
        for b in range(batches):
            events = [{"type": "message", "id": f"p{proc}-{b}-{i}", "timestamp": "2026-01-02T03:04:05Z",
                       "message": {"role": "user", "content": f"fresh word{proc} w{b} n{i} " * (1 + i % 3)}}
                      for i in range(20)]
            await engine.append(AppendParams(sessionKey=f"agent:main:new-{proc}-{b}", events=events,
                                             sessionId=f"new-{proc}-{b}"), index=b % 2 == 0)
asyncio.run(main())
"""


async def test_processes_making_sessions_at_once_and_a_coalesced_reconciliation_keep_counts_exact(pg):
    """Several processes each appending batches to new sessions (a session, a window and a meta
    stamp per batch; every other batch unindexed), then one job reconciling the waiting windows
    many to a transaction: every row is stored once, every branch message indexed once, and the
    BM25 counters of each window are exactly its index rows and their tokens."""
    procs, batches = 3, 6
    async with engine_at(pg) as engine:
        runs = [subprocess.Popen([sys.executable, "-c", NEW_SESSIONS, pg.database_url, str(p), str(batches)])
                for p in range(procs)]
        for run in runs:
            assert await asyncio.to_thread(run.wait, 120) == 0
        store = await engine.store("main")
        dirty = await store.dirty_windows()
        assert len(dirty) == procs * batches // 2
        result = await reconcile_window(store, dirty[0], more_s=60.0)
        assert result.outcome == "published" and sorted([dirty[0], *result.beside]) == dirty
        assert await store.dirty_windows() == []
        with psycopg.connect(pg.database_url) as conn:
            assert conn.execute("SELECT count(*), count(DISTINCT id) FROM ss_events").fetchone() == (
                procs * batches * 20,) * 2
            assert conn.execute("SELECT count(*) FROM ss_events e WHERE e.on_branch = 1 AND e.text IS NOT NULL AND "
                                "NOT EXISTS (SELECT 1 FROM ss_index i WHERE i.id = e.id)").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM ss_windows w LEFT JOIN (SELECT wid, count(*) AS n, sum(dl) AS t "
                                "FROM ss_index GROUP BY wid) i ON i.wid = w.wid WHERE (w.idx_rows, w.idx_tokens) "
                                "IS DISTINCT FROM (coalesce(i.n, 0), coalesce(i.t, 0))").fetchone()[0] == 0
            versions = conn.execute("SELECT meta_seq FROM ss_windows").fetchall()
            assert len(set(versions)) == procs * batches  # one meta version per transaction that made one
        for p in range(procs):
            hits = (await engine.search(SearchParams(query=f"word{p} w{batches - 1}", limit=25)))["results"]
            assert len(hits) == 20


async def test_import_steps_of_one_transaction_keep_each_windows_rows_in_order_and_a_refused_one_costs_itself(pg):
    """The steps of an import transaction are written together (their windows in one round trip,
    their rows in another): a file's later chunk in the same transaction goes after its earlier
    one, other files' steps beside them keep their own windows, and a step the store refuses
    (a session id of another session) sends the others through one by one, each still stored."""
    def events(prefix: str, n: int, parent: str | None = None) -> list:
        return [parse_event(e, "e") for e in chain(prefix, [("user", f"{prefix} text {i}") for i in range(n)], parent)]

    async with engine_at(pg) as engine:
        store = await engine.store("main", create=True)
        a, b = "agent:main:a", "agent:main:b"
        results = await store.import_many([
            (a, {"label": "A"}, events("a", 3), "wa", 3), (b, {"label": "B"}, events("b", 2), "wb", 2),
            (a, None, events("x", 2, parent="a3"), "wa", 5)])
        assert [(r.appended, r.session_id) for r in results] == [(3, "wa"), (2, "wb"), (2, "wa")]
        results = await store.import_many([(b, None, events("y", 1, parent="b2"), "wb", 3),
                                           (a, None, events("z", 1), "wb", 1)])  # wb is b's window
        assert results[0].appended == 1 and isinstance(results[1], Exception)
        with psycopg.connect(pg.database_url) as conn:
            rows = conn.execute("SELECT w.session_id, e.event_id FROM ss_events e JOIN ss_windows w ON w.wid = e.wid "
                                "ORDER BY e.id").fetchall()
            assert rows == [("wa", "a1"), ("wa", "a2"), ("wa", "a3"), ("wa", "x1"), ("wa", "x2"),
                            ("wb", "b1"), ("wb", "b2"), ("wb", "y1")]
            assert conn.execute("SELECT session_id, source_lines, messages, needs_rebuild, last_seq FROM ss_windows "
                                "ORDER BY wid").fetchall() == [("wa", 5, 5, 1, 5), ("wb", 3, 3, 1, 3)]
            assert conn.execute("SELECT session_key, label FROM ss_sessions ORDER BY session_key").fetchall() == [
                (a, "A"), (b, "B")]
            # both windows were made by the first call's one transaction (one meta version), not step by step
            assert conn.execute("SELECT count(DISTINCT meta_seq) FROM ss_windows").fetchone()[0] == 1
        assert (await engine.reconcile_pending("main")) == {"published": 2}
        assert len((await engine.search(SearchParams(query="text", limit=25)))["results"]) == 8


def _pending_pages(url: str) -> int:
    """Pages of the GIN index's pending list, moved into the tree by the call (0: it was empty)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT gin_clean_pending_list('ss_index_tsv'::regclass)").fetchone()[0]


async def test_a_reconciliation_moves_its_index_rows_out_of_the_pending_list_and_appends_keep_it_short(pg):
    """The GIN index's pending list is the writing transaction's to size (migration 7): an append
    leaves it at most 64 kB (every search reads it whole); a reconciliation lets its own rows
    gather (up to BULK_PENDING_KB) and moves them into the tree before it commits."""
    texts = [("user" if i % 2 else "assistant", f"message {i} about topic{i % 13} and w{i} x{i * 7}")
             for i in range(3000)]
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", texts)), index=False)
        assert _pending_pages(pg.database_url) == 0
        assert (await engine.reconcile_pending("main")) == {"published": 1}
        assert _pending_pages(pg.database_url) == 0  # 3,000 rows went to the tree, not left in the list
        for b in range(20):  # appends alone: each insert that finds the list over 64 kB moves it
            await engine.append(AppendParams(sessionKey=f"agent:main:live{b}", events=chain(f"l{b}-", texts[b * 100:(b + 1) * 100])))
        with psycopg.connect(pg.database_url) as conn:
            assert conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'ss_index_tsv'").fetchone()[0] == [
                "fastupdate=on"]
        assert _pending_pages(pg.database_url) <= 64 * 1024 // 8192 + 4  # 64 kB; under the 4 MB default: 35 pages
        hits = (await engine.search(SearchParams(query="topic3", limit=25)))["results"]
        assert len(hits) == 25


RECONCILER = """
import asyncio, sys
from sessionsearch import Engine, Settings
from sessionsearch.transcript.events import parse_event
from sessionsearch.indexer.reconcile import reconcile_window
url, wid = sys.argv[1], int(sys.argv[2])
async def main():
    async with Engine("/nonexistent", settings=Settings(database_url=url)) as engine:
        store = await engine.store("main")
        for _ in range(3):  # a lease of zero: every claim is instantly expired, the other takes it over
            outcome = (await reconcile_window(store, wid, batch_rows=16, lease_s=0.0)).outcome
            print("outcome", outcome, file=sys.stderr, flush=True)
asyncio.run(main())
"""


async def test_two_processes_reconciling_one_window_leave_exactly_its_branch_indexed(pg):
    async with engine_at(pg, reconcile_batch_rows=16) as engine:
        texts = [("user" if i % 2 else "assistant", f"message number {i} about topic{i % 7}") for i in range(192)]
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", texts)), index=False)
        (wid,) = (await engine.pending("main"))["main"]
        runs = [subprocess.Popen([sys.executable, "-c", RECONCILER, pg.database_url, str(wid)], stderr=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, text=True) for _ in range(2)]
        outcomes = [line.split()[1] for run in runs
                    for line in (await asyncio.to_thread(run.communicate, timeout=120))[1].splitlines()
                    if line.startswith("outcome ")]
        assert all(run.returncode == 0 for run in runs) and len(outcomes) == 6
        store = await engine.store("main")
        async with store.reader() as reader:
            rows = await store.index_rows(reader, wid)
            branch = [r[0] for r in await reader.all("SELECT id FROM ss_events WHERE wid = %s AND on_branch = 1 "
                                                     "AND text IS NOT NULL ORDER BY id", (wid,))]
        assert len(rows) == len(set(rows)) and set(rows) <= set(branch)
        if "published" not in outcomes:
            assert (await engine.reconcile("main", wid)).outcome == "published"
        async with store.reader() as reader:
            assert await store.index_rows(reader, wid) == branch and len(branch) == 192
        assert len((await engine.search(SearchParams(query="topic3", limit=25)))["results"]) == 25


async def test_a_new_session_waits_for_no_other_open_transaction_and_versions_commit_in_order(pg):
    """A catalog change takes the agent's meta version at commit (migration 8): an append making
    a session, its transaction still open, does not hold up another append making one; and the
    one committed later has the later version, so a view refreshed at the first one's version
    finds the second's session and window in the changes since."""
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:first", events=[msg("f", "user", "first")]))
        store = await engine.store("main")
        written, release = asyncio.Event(), asyncio.Event()

        async def slow(conn):
            await store._writes.append(conn, "agent:main:slow", [parse_event(msg("s", "user", "slow words"), "e")],
                                       "slow-window", True, None)
            written.set()
            await release.wait()  # the transaction stays open, its rows written

        pending = asyncio.create_task(store.db.tx(slow))
        await asyncio.wait_for(written.wait(), 10)
        # before migration 8 this append waited here for the open transaction's commit
        await asyncio.wait_for(engine.append(AppendParams(sessionKey="agent:main:fast", events=[msg("q", "user", "fast words")])), 10)
        async with store.reader() as reader:
            version, _, sessions, _, _, _ = await store.meta_snapshot(reader)
        assert {s.session_key for s in sessions} == {"agent:main:first", "agent:main:fast"}
        release.set()
        await pending
        async with store.reader() as reader:
            later, whole, sessions, windows, _, _ = await store.meta_snapshot(reader, since=version)
        assert later > version and not whole
        assert [s.session_key for s in sessions] == ["agent:main:slow"]
        assert [w.session_id for w in windows] == ["slow-window"]


async def test_rows_sent_as_prebuilt_binary_arrays_arrive_as_psycopg_would_send_them(pg):
    """arrays.py builds the binary arrays of an append's columns itself: NULLs, empty strings and
    arrays, non-ASCII text and the integer ranges arrive as psycopg's own dumping makes them;
    a value that does not fit falls back to psycopg (and its error)."""
    cases = [("text[]", TextArray, ["a", "", None, "é中文 '\"\\{},", "x" * 5000]), ("text[]", TextArray, []),
             ("text[]", TextArray, [None]), ("bigint[]", Int8Array, [1, -1, 2 ** 63 - 1, None, -2 ** 63]),
             ("integer[]", Int4Array, [1, None, -5, 2 ** 31 - 1]), ("integer[]", Int4Array, [3, 4])]
    async with await psycopg.AsyncConnection.connect(pg.database_url, autocommit=True) as conn:
        await arrays.register(conn)
        for sql_type, kind, values in cases:
            (built,) = arrays.columns((kind,), [values])
            assert isinstance(built, kind)
            query = f"SELECT %b::{sql_type}, array_ndims(%b::{sql_type}), array_lower(%b::{sql_type}, 1)"
            assert (await (await conn.execute(query, (built,) * 3)).fetchone()
                    == await (await conn.execute(query, (values,) * 3)).fetchone())
    assert arrays.columns((Int4Array, TextArray), [[2 ** 31], ["a"]]) == [[2 ** 31], ["a"]]


MIGRATOR = """
import asyncio, sys
from sessionsearch.store.postgres import migrate
print(*asyncio.run(migrate(sys.argv[1])))
"""


def test_migrations_run_once_however_many_processes_start_together():
    url = create_pg_database("ss_pg_migrate")
    try:
        runs = [subprocess.Popen([sys.executable, "-c", MIGRATOR, url], stdout=subprocess.PIPE, text=True)
                for _ in range(3)]
        results = sorted(tuple(map(int, run.communicate(timeout=120)[0].split())) for run in runs)
        assert all(run.returncode == 0 for run in runs)
        assert results == [(0, LATEST)] + [(LATEST, LATEST)] * 2
        assert asyncio.run(schema_version(url)) == LATEST and asyncio.run(migrate(url)) == (LATEST, LATEST)
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT count(*) FROM ss_schema_migrations").fetchone()[0] == len(MIGRATIONS)
    finally:
        drop_pg_database(url)


def _plan_nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


async def test_the_orphan_sweep_deletes_rows_that_left_the_branch_listing_them_once_whatever_the_statistics(pg):
    """sweep_orphans deletes the index rows of a clean window whose row left the branch, and only
    those, keeping the window's counters exact. It lists the orphans, then deletes them by id, and
    neither statement's plan loops over anything but index probes, even with statistics taken
    before the agent's rows were written (they then say it has one row). As one `DELETE … WHERE
    id IN (SELECT …)` it was a nested-loop semi join that ran the whole list again for each of the
    agent's rows (a 40,000-row agent: minutes of CPU in every worker's startup sweep at once)."""
    texts = [("user" if i % 2 else "assistant", f"line {i} about w{i}") for i in range(1, 201)]
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:warm", events=chain("w", texts[:1])))
        with psycopg.connect(pg.database_url, autocommit=True) as conn:
            conn.execute("ANALYZE")  # statistics of a near-empty agent, as before an import
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", texts)))
        gone = [f"m{i}" for i in range(5, 10)]
        with psycopg.connect(pg.database_url, autocommit=True) as conn:
            ano = conn.execute("SELECT ano FROM ss_agents WHERE agent_id = 'main'").fetchone()[0]
            # behind the store's back: five rows leave the branch of a clean window
            conn.execute("UPDATE ss_events SET on_branch = 0 WHERE event_id = ANY(%s)", (gone,))
            ids = [r[0] for r in conn.execute(ORPHANS, {"ano": ano})]
            plans = [conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", args).fetchone()[0][0]
                     for sql, args in ((ORPHANS, {"ano": ano}), (DELETE_INDEX, {"ids": ids}))]
        assert len(ids) == 5
        for plan in plans:
            nodes = list(_plan_nodes(plan["Plan"]))
            for loop in (n for n in nodes if n["Node Type"] == "Nested Loop"):  # each inner side one index probe
                inner = next(c for c in loop["Plans"] if c["Parent Relationship"] == "Inner")
                assert inner["Node Type"] in ("Index Scan", "Index Only Scan"), plan
        assert await engine.sweep_orphans("main") == 5
        assert await engine.sweep_orphans("main") == 0
        with psycopg.connect(pg.database_url) as conn:
            left = conn.execute("SELECT count(*) FROM ss_index WHERE ano = %s", (ano,)).fetchone()[0]
            counted = conn.execute("SELECT sum(idx_rows) FROM ss_windows WHERE ano = %s", (ano,)).fetchone()[0]
        assert left == counted == 201 - 5
        assert (await engine.search(SearchParams(query="w7", limit=5)))["results"] == []
        assert len((await engine.search(SearchParams(query="w12", limit=5)))["results"]) == 1


async def test_a_reconciliation_waits_for_a_free_slot_and_takes_another_when_there_are_more(pg):
    """`reconcile.slots`: a reconciliation's diff takes one of that many advisory locks
    (any process, any host). With the only slot held by another transaction, a reconciliation
    waits for it, its window still unpublished; it then publishes exactly the branch. With two
    slots it takes the free one and does not wait."""
    texts = [("user", f"slot words {i}") for i in range(20)]
    for slots, waits in ((1, True), (2, False)):
        empty_pg_database(pg.database_url)
        async with engine_at(pg, reconcile_slots=slots) as engine:
            await engine.append(AppendParams(sessionKey=KEY, events=chain("m", texts)), index=False)
            (wid,) = (await engine.pending("main"))["main"]
            async with await psycopg.AsyncConnection.connect(pg.database_url) as holder:
                await holder.execute("SELECT pg_advisory_xact_lock(%s, 0)", (SLOT_LOCK,))
                job = asyncio.create_task(engine.reconcile("main", wid))
                if waits:

                    async def waiting() -> bool:
                        waits_now = await _waiting_for_slot(pg.database_url)
                        assert waits_now or not job.done()
                        return waits_now

                    await until(waiting, 60, "the job to wait for the slot")
                    assert (await engine.pending("main"))["main"] == [wid]
                    await holder.rollback()
                result = await asyncio.wait_for(job, 60)
            assert result.outcome == "published"
            assert len((await engine.search(SearchParams(query="slot words", limit=25)))["results"]) == 20


async def _waiting_for_slot(url: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        row = await (await conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                                        "AND classid = %s::bigint::oid", (SLOT_LOCK,))).fetchone()
    return row[0] > 0
