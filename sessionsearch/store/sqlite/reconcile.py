"""The reconciliation transactions of an agent database's writer, mixed into SqliteWriter.

Claims and their lease, the diff of a window's index rows against its active branch, publishing
against a generation, coalescing small waiting windows into one transaction, and the sweep of
orphan rows (SPEC §3). Each public method is one transaction on the writer's thread.
"""

from __future__ import annotations

import sqlite3
import time

from ..base import ClaimInfo
from ...text.cjk import index_text
from ..rowids import MAX_SEQ, seq_ranges, wid_sql
from .fts import INDEX_TEXT_SQL

INDEXABLE = "on_branch = 1 AND text IS NOT NULL"
COALESCE_WINDOWS = 64  # most windows one reconciliation transaction rebuilds
CONTENDED_S = 0.002  # a BEGIN that waited this long met another process's writer


def _claim(c: sqlite3.Connection, wid: int, token: str, lease_s: float, now: float) -> ClaimInfo | None:
    """Take the window's claim unless a live one is held (inside a transaction)."""
    row = c.execute(
        "UPDATE windows SET claim_token = ?, claim_expires_at = ? "
        "WHERE wid = ? AND (claim_token IS NULL OR claim_expires_at < ?) "
        "RETURNING needs_rebuild, rebuild_gen, last_seq, cold", (token, now + lease_s, wid, now)).fetchone()
    return None if row is None else ClaimInfo(bool(row[0]), row[1], row[2], bool(row[3]))


class ReconcileWrites:
    """Needs from the writer: `c`, `tx()`, `_bump_dirty()`, `_log_indexed()` and `_log_indexed_sql()`
    (hot.py), `_log_gone()` (prefixes.py), `lock_wait_s` (how long the last BEGIN waited) and `rows_in_sql`."""

    c: sqlite3.Connection
    rows_in_sql: bool
    lock_wait_s: float
    # windows being rebuilt beside another one in the transaction running now; read by this
    # process's jobs from other threads, so replaced whole, never mutated
    rebuilding: frozenset[int] = frozenset()

    def claim(self, wid: int, token: str, lease_s: float) -> ClaimInfo | None:
        now = time.time()
        with self.tx() as c:
            return _claim(c, wid, token, lease_s, now)

    def claim_and_reconcile_small(self, wid: int, token: str, lease_s: float,
                                  max_rows: int) -> tuple[str, ClaimInfo | None, int, int, list[int]]:
        """Claim; and if the window has at most `max_rows` rows, rebuild and publish it in the same
        transaction, together with other small unclaimed windows needing it while the rows last.

        Returns (outcome, claim, deleted, inserted, other windows published with this one); outcome
        "claimed" means the window is larger and the claim is held for the batched path. A window
        already clean and unclaimed is answered "clean" without writing anything.
        """
        try:
            return self._claim_and_reconcile_small(wid, token, lease_s, max_rows)
        finally:
            self.rebuilding = frozenset()  # committed or rolled back: their own jobs look for themselves

    def _claim_and_reconcile_small(self, wid: int, token: str, lease_s: float,
                                   max_rows: int) -> tuple[str, ClaimInfo | None, int, int, list[int]]:
        now = time.time()
        with self.tx() as c:
            state = c.execute("SELECT needs_rebuild, claim_token IS NULL OR claim_expires_at < ? FROM windows "
                              "WHERE wid = ?", (now, wid)).fetchone()
            if state is None:
                return "missing", None, 0, 0, []
            if not state[0] and state[1]:  # reconciled meanwhile (perhaps beside another window)
                return "clean", None, 0, 0, []
            claim = _claim(c, wid, token, lease_s, now)
            if claim is None:
                return "busy", None, 0, 0, []
            if claim.needs_rebuild and not claim.cold and claim.last_seq > max_rows:
                return "claimed", claim, 0, 0, []
            deleted = inserted = 0
            beside: list[int] = []
            if claim.needs_rebuild and not claim.cold:
                deleted, inserted = self._rebuild_whole(wid)
                # Each job pays a queue round trip and a commit: small windows waiting beside this
                # one are rebuilt in the same transaction, and their own jobs then find them clean.
                beside = self._waiting_beside(wid, max_rows - claim.last_seq)
                d, i = self._rebuild_published(beside)
                deleted, inserted = deleted + d, inserted + i
                self._bump_dirty()
            c.execute("UPDATE windows SET claim_token = NULL, claim_expires_at = NULL WHERE wid = ?", (wid,))
            outcome = "cold" if claim.cold else ("published" if claim.needs_rebuild else "clean")
        return outcome, claim, deleted, inserted, beside

    def reconcile_next(self, after: int, max_rows: int) -> tuple[list[int], int, int, bool]:
        """Rebuild and publish, in one transaction, small unclaimed windows needing it that come
        next after window `after` (else before it), up to `max_rows` rows. Returns (windows,
        deleted, inserted, contended); no windows when none is waiting; contended when another
        process held the write lock first. What a job that has published its own window does while
        it has time left, so that the writer is never idle between jobs."""
        try:
            with self.tx():
                picked = self._waiting_beside(after, max_rows)
                deleted, inserted = self._rebuild_published(picked)
                if picked:
                    self._bump_dirty()
            return picked, deleted, inserted, self.lock_wait_s > CONTENDED_S
        finally:
            self.rebuilding = frozenset()

    def _waiting_beside(self, wid: int, budget: int) -> list[int]:
        """Small unclaimed windows needing reconciliation next to `wid` (after it first, the order jobs
        are sent in), whose rows together fit `budget`."""
        picked: list[int] = []
        for sql in ("SELECT wid, last_seq FROM windows WHERE needs_rebuild = 1 AND wid > ? AND cold = 0 "
                    "AND claim_token IS NULL AND last_seq <= ? ORDER BY wid LIMIT ?",
                    "SELECT wid, last_seq FROM windows WHERE needs_rebuild = 1 AND wid < ? AND cold = 0 "
                    "AND claim_token IS NULL AND last_seq <= ? ORDER BY wid DESC LIMIT ?"):
            for other, rows in self.c.execute(sql, (wid, budget, COALESCE_WINDOWS - len(picked))).fetchall():
                if rows > budget:
                    continue
                budget -= rows
                picked.append(other)
            if len(picked) >= COALESCE_WINDOWS:
                break
        return picked

    def _rebuild_published(self, wids: list[int]) -> tuple[int, int]:
        """Rebuild whole windows picked by _waiting_beside (inside a transaction), telling jobs of
        this process that they are being rebuilt (`rebuilding`, cleared by the caller)."""
        self.rebuilding = frozenset(wids)
        deleted = inserted = 0
        for wid in wids:
            d, i = self._rebuild_whole(wid)
            deleted, inserted = deleted + d, inserted + i
        return deleted, inserted

    def _rebuild_whole(self, wid: int) -> tuple[int, int]:
        """Index a whole window from its active branch and mark it indexed (inside a transaction)."""
        deleted, inserted = self._diff(wid, 0, MAX_SEQ)
        self.c.execute("UPDATE windows SET needs_rebuild = 0, indexed_seq = last_seq, indexed_leaf = leaf_seq "
                       "WHERE wid = ?", (wid,))
        return deleted, inserted

    def _diff(self, wid: int, first_seq: int, last_seq: int) -> tuple[int, int]:
        """Make the index rows of seqs first..last match the active branch (inside a transaction).

        Rows to add go in by `INSERT INTO msg_fts SELECT` when `rows_in_sql` (worker processes),
        else read out and inserted with executemany. Alone in a process executemany is 15-20%
        faster (FTS5 stages an INSERT … SELECT in a temporary table first); in a worker, whose
        Dramatiq threads hold the GIL much of the time, executemany waits for it at every row and
        the statement that never leaves C was 8% faster (4 of 4 paired runs).
        """
        deleted = inserted = 0
        for lo, hi in seq_ranges(wid, first_seq, last_seq):  # the seqs' ids: one range, or two
            d, i = self._diff_range(lo, hi)
            deleted, inserted = deleted + d, inserted + i
        return deleted, inserted

    def _diff_range(self, lo: int, hi: int) -> tuple[int, int]:
        # the index form of the text (store/cjk.py): in SQL, or in Python for executemany
        text = INDEX_TEXT_SQL if self.rows_in_sql else "text"
        select = f"SELECT id, {text}, ts, event_id FROM events WHERE id BETWEEN :lo AND :hi AND {INDEXABLE}"
        if self.c.execute("SELECT 1 FROM msg_fts WHERE rowid BETWEEN ? AND ? LIMIT 1", (lo, hi)).fetchone() is None:
            deleted = 0  # nothing indexed here yet (an import): a plain insert, no diff to compute
        else:
            stale = ("rowid BETWEEN :lo AND :hi AND rowid NOT IN "
                     f"(SELECT id FROM events WHERE id BETWEEN :lo AND :hi AND {INDEXABLE})")
            self._log_gone(stale, {"lo": lo, "hi": hi})
            deleted = self.c.execute(f"DELETE FROM msg_fts WHERE {stale}", {"lo": lo, "hi": hi}).rowcount
            select += " AND id NOT IN (SELECT rowid FROM msg_fts WHERE rowid BETWEEN :lo AND :hi)"
        if self.rows_in_sql:
            self._log_indexed_sql(select, {"lo": lo, "hi": hi})  # before: the select skips indexed rows
            return deleted, self.c.execute(f"INSERT INTO msg_fts (rowid, text, ts, mid) {select}",
                                           {"lo": lo, "hi": hi}).rowcount
        rows = [(rid, index_text(body), ts, mid)
                for rid, body, ts, mid in self.c.execute(select, {"lo": lo, "hi": hi}).fetchall()]
        self.c.executemany("INSERT INTO msg_fts (rowid, text, ts, mid) VALUES (?, ?, ?, ?)", rows)
        self._log_indexed([r[0] for r in rows])
        return deleted, len(rows)

    def window_exists(self, wid: int) -> bool:
        return self.c.execute("SELECT 1 FROM windows WHERE wid = ?", (wid,)).fetchone() is not None

    def reconcile_batch(self, wid: int, token: str, first_seq: int, last_seq: int,
                        lease_s: float) -> tuple[int, int] | None:
        with self.tx() as c:
            if c.execute("UPDATE windows SET claim_expires_at = ? WHERE wid = ? AND claim_token = ? RETURNING 1",
                         (time.time() + lease_s, wid, token)).fetchone() is None:
                return None
            return self._diff(wid, first_seq, last_seq)

    def publish(self, wid: int, token: str, rebuild_gen: int) -> str:
        with self.tx() as c:
            if c.execute(
                    "UPDATE windows SET needs_rebuild = 0, indexed_seq = last_seq, indexed_leaf = leaf_seq, "
                    "claim_token = NULL, claim_expires_at = NULL "
                    "WHERE wid = ? AND claim_token = ? AND rebuild_gen = ? RETURNING 1",
                    (wid, token, rebuild_gen)).fetchone():
                self._bump_dirty()
                return "published"
            held = c.execute("SELECT 1 FROM windows WHERE wid = ? AND claim_token = ?", (wid, token)).fetchone()
        return "changed" if held else "lost"

    def release(self, wid: int, token: str) -> None:
        with self.tx() as c:
            c.execute("UPDATE windows SET claim_token = NULL, claim_expires_at = NULL "
                      "WHERE wid = ? AND claim_token = ?", (wid, token))

    def window_gen(self, wid: int) -> tuple[int, int, bool] | None:
        row = self.c.execute("SELECT rebuild_gen, last_seq, needs_rebuild FROM windows WHERE wid = ?",
                             (wid,)).fetchone()
        return (row[0], row[1], bool(row[2])) if row else None

    def sweep_orphans(self) -> int:
        """Delete index rows whose window is gone or cold, or (clean windows) whose row is off the branch."""
        orphan = ("rowid IN (SELECT f.rowid FROM msg_fts f "
                  f"LEFT JOIN windows win ON win.wid = {wid_sql('f.rowid')} "
                  "WHERE win.wid IS NULL OR win.cold = 1 OR (win.needs_rebuild = 0 AND NOT EXISTS "
                  "(SELECT 1 FROM events e WHERE e.id = f.rowid AND e.on_branch = 1 AND e.text IS NOT NULL)))")
        with self.tx() as c:
            self._log_gone(orphan, ())
            return c.execute(f"DELETE FROM msg_fts WHERE {orphan}").rowcount

    def dirty_windows(self) -> list[int]:
        return [r[0] for r in self.c.execute("SELECT wid FROM windows WHERE needs_rebuild = 1 ORDER BY wid")]
