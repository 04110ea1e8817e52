"""The reconciliation primitives of an agent database's writer (store.base.ReconcileTx).

Claims and their lease, the diff of a window's index rows against its active branch, publishing
against a generation, the windows waiting beside another, and the sweep of orphan rows (SPEC §3).
indexer/reconcile.py decides; each of its steps runs whole on the writer's thread, in one
transaction (`run_step`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from ...text.cjk import index_text
from ..base import ClaimInfo, ReconcileTx, RowChanges, Waiting, WindowGen, WindowState
from ..rowids import MAX_SEQ, seq_ranges, wid_sql
from .fts import INDEX_TEXT_SQL, INDEXABLE
from .meaning import SqliteEmbedTx

if TYPE_CHECKING:
    from .writer import SqliteWriter

T = TypeVar("T")
CONTENDED_S = 0.002  # a BEGIN that waited this long met another process's writer


def run_step(writer: SqliteWriter, step: Callable[[ReconcileTx], Awaitable[T]]) -> T:
    """Run a reconciliation step as one transaction, here on the writer's thread.

    The step is a coroutine only so that one algorithm serves both backends: every await in it
    is of a primitive below, which never suspends, so it runs to its end at the first send.
    """
    try:
        with writer.tx():
            return _run_to_end(step(SqliteReconcileTx(writer, time.time())))
    finally:
        writer.rebuilding = frozenset()  # committed or rolled back: their own jobs look for themselves


def _run_to_end(awaitable: Awaitable[T]) -> T:
    coro: Coroutine[Any, Any, T] = awaitable  # type: ignore[assignment]  # async def steps are coroutines
    try:
        coro.send(None)
    except StopIteration as done:
        value: T = done.value
        return value
    coro.close()
    raise RuntimeError("a reconciliation step suspended inside a SQLite write transaction")


class SqliteReconcileTx(SqliteEmbedTx):
    """The primitives inside one write transaction of the writer; `now` is the transaction's clock."""

    def __init__(self, writer: SqliteWriter, now: float) -> None:
        self.w = writer
        self.c = writer.c
        self.now = now

    async def window_state(self, wid: int) -> WindowState | None:
        row = self.c.execute("SELECT needs_rebuild, claim_token IS NULL OR claim_expires_at < ? FROM windows "
                             "WHERE wid = ?", (self.now, wid)).fetchone()
        return None if row is None else WindowState(bool(row[0]), bool(row[1]))

    async def take_claim(self, wid: int, token: str, lease_s: float) -> ClaimInfo | None:
        row = self.c.execute(
            "UPDATE windows SET claim_token = ?, claim_expires_at = ? "
            "WHERE wid = ? AND (claim_token IS NULL OR claim_expires_at < ?) "
            "RETURNING needs_rebuild, rebuild_gen, last_seq, cold",
            (token, self.now + lease_s, wid, self.now)).fetchone()
        return None if row is None else ClaimInfo(bool(row[0]), row[1], row[2], bool(row[3]))

    async def renew_claim(self, wid: int, token: str, lease_s: float) -> bool:
        return self.c.execute("UPDATE windows SET claim_expires_at = ? WHERE wid = ? AND claim_token = ? RETURNING 1",
                              (self.now + lease_s, wid, token)).fetchone() is not None

    async def drop_claim(self, wid: int, token: str) -> None:
        self.c.execute("UPDATE windows SET claim_token = NULL, claim_expires_at = NULL "
                       "WHERE wid = ? AND claim_token = ?", (wid, token))

    async def waiting(self, wid: int, *, after: bool, max_rows: int, limit: int) -> list[Waiting]:
        cmp, order = (">", "") if after else ("<", " DESC")
        rows = self.c.execute(f"SELECT wid, last_seq FROM windows WHERE needs_rebuild = 1 AND wid {cmp} ? AND cold = 0 "
                              f"AND claim_token IS NULL AND last_seq <= ? ORDER BY wid{order} LIMIT ?",
                              (wid, max_rows, limit)).fetchall()
        return [Waiting(other, n) for other, n in rows]

    def rebuilding(self, wids: frozenset[int]) -> None:
        self.w.rebuilding = wids

    async def rebuild_whole(self, wids: list[int]) -> RowChanges:
        deleted = inserted = 0
        for wid in wids:
            d, i = self._diff(wid, 0, MAX_SEQ)
            self.c.execute("UPDATE windows SET needs_rebuild = 0, indexed_seq = last_seq, indexed_leaf = leaf_seq "
                           "WHERE wid = ?", (wid,))
            deleted, inserted = deleted + d, inserted + i
        return RowChanges(deleted, inserted)

    async def diff(self, wid: int, first_seq: int, last_seq: int) -> RowChanges:
        return self._diff(wid, first_seq, last_seq)

    async def mark_published(self, wid: int, token: str, rebuild_gen: int) -> bool:
        return self.c.execute(
            "UPDATE windows SET needs_rebuild = 0, indexed_seq = last_seq, indexed_leaf = leaf_seq, "
            "claim_token = NULL, claim_expires_at = NULL "
            "WHERE wid = ? AND claim_token = ? AND rebuild_gen = ? RETURNING 1",
            (wid, token, rebuild_gen)).fetchone() is not None

    async def holds_claim(self, wid: int, token: str) -> bool:
        return self.c.execute("SELECT 1 FROM windows WHERE wid = ? AND claim_token = ?",
                              (wid, token)).fetchone() is not None

    async def window_gen(self, wid: int) -> WindowGen | None:
        row = self.c.execute("SELECT rebuild_gen, last_seq, needs_rebuild FROM windows WHERE wid = ?",
                             (wid,)).fetchone()
        return WindowGen(row[0], row[1], bool(row[2])) if row else None

    async def index_changed(self) -> None:
        self.w.bump_dirty()

    def contended(self) -> bool:
        return self.w.lock_wait_s > CONTENDED_S

    def _diff(self, wid: int, first_seq: int, last_seq: int) -> RowChanges:
        """Make the index rows of seqs first..last match the active branch.

        Rows to add go in by `INSERT INTO msg_fts SELECT` when `rows_in_sql` (worker processes),
        else read out and inserted with executemany: alone in a process executemany is faster, in
        a worker, whose Dramatiq threads hold the GIL, the statement that never leaves C is
        (docs/architecture/decisions.md).
        """
        deleted = inserted = 0
        for lo, hi in seq_ranges(wid, first_seq, last_seq):  # the seqs' ids: one range, or two
            d, i = self._diff_range(lo, hi)
            deleted, inserted = deleted + d, inserted + i
        if inserted:  # the new rows wait for the embed job
            self.c.execute("UPDATE windows SET needs_embed = 1 WHERE wid = ?", (wid,))
        return RowChanges(deleted, inserted)

    def _diff_range(self, lo: int, hi: int) -> tuple[int, int]:
        # the index form of the text (store/cjk.py): in SQL, or in Python for executemany
        rows_in_sql = self.w.rows_in_sql
        text = INDEX_TEXT_SQL if rows_in_sql else "text"
        select = f"SELECT id, {text}, ts, event_id FROM events WHERE id BETWEEN :lo AND :hi AND {INDEXABLE}"
        if self.c.execute("SELECT 1 FROM msg_fts WHERE rowid BETWEEN ? AND ? LIMIT 1", (lo, hi)).fetchone() is None:
            deleted = 0  # nothing indexed here yet (an import): a plain insert, no diff to compute
        else:
            stale = ("rowid BETWEEN :lo AND :hi AND rowid NOT IN "
                     f"(SELECT id FROM events WHERE id BETWEEN :lo AND :hi AND {INDEXABLE})")
            self.w.prefixes.log_gone(stale, {"lo": lo, "hi": hi})
            deleted = self.c.execute(f"DELETE FROM msg_fts WHERE {stale}", {"lo": lo, "hi": hi}).rowcount
            select += " AND id NOT IN (SELECT rowid FROM msg_fts WHERE rowid BETWEEN :lo AND :hi)"
        if rows_in_sql:
            self.w.hot.log_indexed_sql(select, {"lo": lo, "hi": hi})  # before: the select skips indexed rows
            return deleted, self.c.execute(f"INSERT INTO msg_fts (rowid, text, ts, mid) {select}",
                                           {"lo": lo, "hi": hi}).rowcount
        rows = [(rid, index_text(body), ts, mid)
                for rid, body, ts, mid in self.c.execute(select, {"lo": lo, "hi": hi}).fetchall()]
        self.c.executemany("INSERT INTO msg_fts (rowid, text, ts, mid) VALUES (?, ?, ?, ?)", rows)
        self.w.hot.log_indexed(rows)
        return deleted, len(rows)


def sweep_orphans(writer: SqliteWriter) -> int:
    """Delete index rows whose window is gone or cold, or (clean windows) whose row is off the branch."""
    orphan = ("rowid IN (SELECT f.rowid FROM msg_fts f "
              f"LEFT JOIN windows win ON win.wid = {wid_sql('f.rowid')} "
              "WHERE win.wid IS NULL OR win.cold = 1 OR (win.needs_rebuild = 0 AND NOT EXISTS "
              "(SELECT 1 FROM events e WHERE e.id = f.rowid AND e.on_branch = 1 AND e.text IS NOT NULL)))")
    with writer.tx() as c:
        writer.prefixes.log_gone(orphan, ())
        deleted: int = c.execute(f"DELETE FROM msg_fts WHERE {orphan}").rowcount
        return deleted


def dirty_windows(writer: SqliteWriter) -> list[int]:
    return [r[0] for r in writer.c.execute("SELECT wid FROM windows WHERE needs_rebuild = 1 ORDER BY wid")]
