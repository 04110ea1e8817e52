"""A rewind moves the active branch by what changes (store/branch.py): it writes the rows that leave
or join the branch, never the rest of the window, and the branch and the window's message count
it leaves are those of a walk from the new leaf (SPEC §2, active branch)."""

from __future__ import annotations

import sqlite3
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from sessionsearch.protocol import AppendParams, HistoryParams
from sessionsearch.store.rowids import seq_of

from ..helpers import BASE_TS, Where, engine_at, leaf, msg, sql_rows

KEY = "agent:main:long"


@asynccontextmanager
async def moved_rows(where: Where):
    """A trigger of the test's own on the transcript rows: `read()` gives the message ids whose
    `on_branch` a write set since the last read (the rows it wrote, whatever it wrote them to)."""
    if where.database_url is None:
        db = sqlite3.connect(where.data_dir / "agents" / "main.db", isolation_level=None)
        db.execute("CREATE TABLE test_moved (mid TEXT)")
        db.execute("CREATE TRIGGER test_moved AFTER UPDATE OF on_branch ON events "
                   "BEGIN INSERT INTO test_moved VALUES (new.event_id); END")

        def read() -> list[str]:
            got = [r[0] for r in db.execute("SELECT mid FROM test_moved")]
            db.execute("DELETE FROM test_moved")
            return sorted(got)
        try:
            yield read
        finally:
            db.execute("DROP TRIGGER test_moved")
            db.execute("DROP TABLE test_moved")
            db.close()
        return
    pg = psycopg.connect(where.database_url, autocommit=True)
    pg.execute("CREATE TABLE test_moved (mid text)")
    pg.execute("CREATE FUNCTION test_moved() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
               "INSERT INTO test_moved VALUES (NEW.event_id); RETURN NULL; END $$")
    pg.execute("CREATE TRIGGER test_moved AFTER UPDATE OF on_branch ON ss_events FOR EACH ROW "
               "EXECUTE FUNCTION test_moved()")

    def read_pg() -> list[str]:
        got = [r[0] for r in pg.execute("DELETE FROM test_moved RETURNING mid").fetchall()]
        return sorted(got)
    try:
        yield read_pg
    finally:
        pg.execute("DROP TRIGGER test_moved ON ss_events")
        pg.execute("DROP FUNCTION test_moved()")
        pg.execute("DROP TABLE test_moved")
        pg.close()


async def branch_state(engine: Any) -> tuple[list[str], list[str], int]:
    """(the message ids on the branch as stored, as a walk up from the window's leaf finds them,
    the window's message count): the stored projection, the tree's, and the counter kept with it."""
    store = await engine.store("main")
    rows = await sql_rows(store, "SELECT id, event_id, parent_seq, node_seq, on_branch, text FROM events ORDER BY id",
                          "SELECT id, event_id, parent_seq, node_seq, on_branch, text FROM ss_events ORDER BY id")
    leaf_seq, messages = (await sql_rows(store, "SELECT leaf_seq, messages FROM windows",
                                         "SELECT leaf_seq, messages FROM ss_windows"))[0]
    by_seq = {node: (mid, parent) for rid, mid, parent, node, _, _ in rows if node == seq_of(rid)}  # not leaf controls
    walked, seq = [], leaf_seq
    while seq is not None:
        mid, seq = by_seq[seq]
        walked.append(mid)
    stored = [mid for _, mid, _, _, on, _ in rows if on]
    assert messages == sum(1 for *_, on, text in rows if on and text is not None)
    return stored, sorted(walked, key=lambda m: [r[1] for r in rows].index(m)), messages


async def test_a_rewind_writes_only_the_rows_that_leave_or_join_the_branch(backend):
    talk = [msg(f"m{i}", "user" if i % 2 else "assistant", f"line {i} of a long talk", f"m{i - 1}" if i > 1 else None,
                ts=BASE_TS + i) for i in range(1, 201)]
    async with engine_at(backend) as engine:
        for start in range(0, 200, 50):
            await engine.append(AppendParams(sessionKey=KEY, events=talk[start:start + 50]))
        async with moved_rows(backend) as moved:
            # back three messages: those three leave the branch, the 197 before them stay untouched
            result = await engine.append(AppendParams(sessionKey=KEY, events=[leaf("l1", "m200", "m197")]))
            assert result["needsReconcile"] is True
            assert moved() == ["m198", "m199", "m200"]
            stored, walked, messages = await branch_state(engine)
            assert stored == walked == [f"m{i}" for i in range(1, 198)] and messages == 197

            # on from the new leaf: a linear append, nothing moves
            await engine.append(AppendParams(sessionKey=KEY, events=[msg("n1", "user", "a new turn", "m197")]))
            assert moved() == []

            # over to the abandoned branch: n1 leaves, m198 and m199 join
            await engine.append(AppendParams(sessionKey=KEY, events=[leaf("l2", "n1", "m199")]))
            assert moved() == ["m198", "m199", "n1"]
            stored, walked, messages = await branch_state(engine)
            assert stored == walked == [f"m{i}" for i in range(1, 200)] and messages == 199

            # a new root (no parent) leaves the whole branch for the one row
            await engine.append(AppendParams(sessionKey=KEY, events=[msg("r1", "user", "start over", None)]))
            assert len(moved()) == 200
            stored, walked, messages = await branch_state(engine)
            assert stored == walked == ["r1"] and messages == 1

            # back into the old tree at its middle, with new rows on the way in one batch
            await engine.append(AppendParams(sessionKey=KEY, events=[
                leaf("l3", "r1", "m100"), msg("p1", "assistant", "picks up", "m100"),
                msg("x1", "user", "a side note", "m50", appendMode="side")]))
            assert moved() == sorted(["r1", "p1", *(f"m{i}" for i in range(1, 101))])
            stored, walked, messages = await branch_state(engine)
            assert stored == walked == [*(f"m{i}" for i in range(1, 101)), "p1"] and messages == 101

        await engine.reconcile_pending()
        history = await engine.history(HistoryParams(sessionKey=KEY, limit=200))
        assert [m["messageId"] for m in history["messages"]][-2:] == ["m100", "p1"]
