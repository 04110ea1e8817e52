"""Reconciliation on PostgreSQL: claims with a lease, the diff of a window's index rows against
its active branch, publishing against a generation, and coalescing small waiting windows.

Everything that must hold across worker processes on many hosts is decided under the window's
row lock inside one transaction: a claim is a compare-and-set of (claim_token, claim_expires_at)
against the database's clock; every batch renews the lease only while the token is still the
holder's (fencing: a holder whose lease was taken over writes nothing); publishing marks the
window clean only if its `rebuild_gen` is still the one the claim read (a non-linear append in
between bumps it). Small windows rebuilt beside another are picked with `FOR UPDATE SKIP LOCKED`,
so two workers never pick the same one and neither waits for the other.
"""

from __future__ import annotations

from ..base import ClaimInfo
from ..rowids import MAX_SEQ, seq_ranges
from .db import all_rows, now_s, one
from .writer import INDEXABLE, count_index, delete_index, insert_index

COALESCE_WINDOWS = 64  # most windows one reconciliation transaction rebuilds


async def _claim(conn, wid: int, token: str, lease_s: float, now: float) -> ClaimInfo | None:
    row = await one(conn, "UPDATE ss_windows SET claim_token = %s, claim_expires_at = %s "
                          "WHERE wid = %s AND (claim_token IS NULL OR claim_expires_at < %s) "
                          "RETURNING needs_rebuild, rebuild_gen, last_seq, cold", (token, now + lease_s, wid, now))
    return None if row is None else ClaimInfo(bool(row[0]), row[1], row[2], bool(row[3]))


class ReconcileWrites:
    """The reconciliation transactions of one agent; `rebuilding` tells this process's jobs which
    windows a running transaction is rebuilding beside another."""

    def __init__(self, ano: int) -> None:
        self.ano = ano
        self.rebuilding: frozenset[int] = frozenset()

    async def claim(self, conn, wid: int, token: str, lease_s: float) -> ClaimInfo | None:
        return await _claim(conn, wid, token, lease_s, await now_s(conn))

    async def claim_and_reconcile_small(self, conn, wid: int, token: str, lease_s: float, max_rows: int):
        now = await now_s(conn)
        state = await one(conn, "SELECT needs_rebuild, claim_token IS NULL OR claim_expires_at < %s FROM ss_windows "
                                "WHERE wid = %s AND ano = %s FOR UPDATE", (now, wid, self.ano))
        if state is None:
            return "missing", None, 0, 0, []
        if not state[0] and state[1]:
            return "clean", None, 0, 0, []
        claim = await _claim(conn, wid, token, lease_s, now)
        if claim is None:
            return "busy", None, 0, 0, []
        if claim.needs_rebuild and not claim.cold and claim.last_seq > max_rows:
            return "claimed", claim, 0, 0, []
        deleted = inserted = 0
        beside: list[int] = []
        if claim.needs_rebuild and not claim.cold:
            deleted, inserted = await self._rebuild_whole(conn, wid)
            beside = await self._waiting_beside(conn, wid, max_rows - claim.last_seq)
            d, i = await self._rebuild_published(conn, beside)
            deleted, inserted = deleted + d, inserted + i
        await conn.execute("UPDATE ss_windows SET claim_token = NULL, claim_expires_at = NULL WHERE wid = %s", (wid,))
        outcome = "cold" if claim.cold else ("published" if claim.needs_rebuild else "clean")
        return outcome, claim, deleted, inserted, beside

    async def reconcile_next(self, conn, after: int, max_rows: int) -> tuple[list[int], int, int, bool]:
        picked = await self._waiting_beside(conn, after, max_rows)
        deleted, inserted = await self._rebuild_published(conn, picked)
        return picked, deleted, inserted, False  # no agent-wide write lock to contend for

    async def _waiting_beside(self, conn, wid: int, budget: int) -> list[int]:
        """Small unclaimed windows needing reconciliation next to `wid` whose rows fit `budget`,
        locked (others' locked ones skipped)."""
        picked: list[int] = []
        for cmp, order in ((">", "ASC"), ("<", "DESC")):
            rows = await all_rows(
                conn, f"SELECT wid, last_seq FROM ss_windows WHERE ano = %s AND needs_rebuild = 1 AND wid {cmp} %s "
                      f"AND cold = 0 AND claim_token IS NULL AND last_seq <= %s ORDER BY wid {order} LIMIT %s "
                      "FOR UPDATE SKIP LOCKED", (self.ano, wid, budget, COALESCE_WINDOWS - len(picked)))
            for other, n in rows:
                if n > budget:
                    continue
                budget -= n
                picked.append(other)
            if len(picked) >= COALESCE_WINDOWS:
                break
        return picked

    async def _rebuild_published(self, conn, wids: list[int]) -> tuple[int, int]:
        self.rebuilding = frozenset(wids)
        deleted = inserted = 0
        for wid in wids:
            d, i = await self._rebuild_whole(conn, wid)
            deleted, inserted = deleted + d, inserted + i
        return deleted, inserted

    async def _rebuild_whole(self, conn, wid: int) -> tuple[int, int]:
        deleted, inserted = await self.diff(conn, wid, 0, MAX_SEQ)
        await conn.execute("UPDATE ss_windows SET needs_rebuild = 0, indexed_seq = last_seq, indexed_leaf = leaf_seq "
                           "WHERE wid = %s", (wid,))
        return deleted, inserted

    async def diff(self, conn, wid: int, first_seq: int, last_seq: int) -> tuple[int, int]:
        """Make the index rows of seqs first..last match the active branch."""
        deleted = inserted = 0
        for lo, hi in seq_ranges(wid, first_seq, last_seq):
            gone = await delete_index(
                conn, "id BETWEEN %(lo)s AND %(hi)s AND id NOT IN "
                      f"(SELECT id FROM ss_events WHERE id BETWEEN %(lo)s AND %(hi)s AND {INDEXABLE})",
                {"lo": lo, "hi": hi})
            deleted += sum(n for n, _ in gone.values())
            rows = await all_rows(
                conn, f"SELECT e.id, e.text, e.ts, e.event_id FROM ss_events e WHERE e.id BETWEEN %(lo)s AND %(hi)s "
                      f"AND e.{INDEXABLE.replace(' AND ', ' AND e.')} AND NOT EXISTS "
                      "(SELECT 1 FROM ss_index i WHERE i.id = e.id) ORDER BY e.id", {"lo": lo, "hi": hi})
            n, tokens = await insert_index(conn, self.ano, wid, rows)
            await count_index(conn, wid, n, tokens)
            inserted += n
        return deleted, inserted

    async def reconcile_batch(self, conn, wid: int, token: str, first_seq: int, last_seq: int,
                              lease_s: float) -> tuple[int, int] | None:
        now = await now_s(conn)
        if await one(conn, "UPDATE ss_windows SET claim_expires_at = %s WHERE wid = %s AND claim_token = %s "
                           "RETURNING 1", (now + lease_s, wid, token)) is None:
            return None
        return await self.diff(conn, wid, first_seq, last_seq)

    async def publish(self, conn, wid: int, token: str, rebuild_gen: int) -> str:
        if await one(conn, "UPDATE ss_windows SET needs_rebuild = 0, indexed_seq = last_seq, indexed_leaf = leaf_seq, "
                           "claim_token = NULL, claim_expires_at = NULL "
                           "WHERE wid = %s AND claim_token = %s AND rebuild_gen = %s RETURNING 1",
                     (wid, token, rebuild_gen)):
            return "published"
        held = await one(conn, "SELECT 1 FROM ss_windows WHERE wid = %s AND claim_token = %s", (wid, token))
        return "changed" if held else "lost"

    async def release(self, conn, wid: int, token: str) -> None:
        await conn.execute("UPDATE ss_windows SET claim_token = NULL, claim_expires_at = NULL "
                           "WHERE wid = %s AND claim_token = %s", (wid, token))

    async def window_gen(self, conn, wid: int) -> tuple[int, int, bool] | None:
        row = await one(conn, "SELECT rebuild_gen, last_seq, needs_rebuild FROM ss_windows WHERE wid = %s AND ano = %s",
                        (wid, self.ano))
        return (row[0], row[1], bool(row[2])) if row else None

    async def sweep_orphans(self, conn) -> int:
        """Index rows whose window is gone or cold, or (clean windows) whose row left the branch."""
        gone = await delete_index(
            conn, "ano = %(ano)s AND id IN (SELECT f.id FROM ss_index f LEFT JOIN ss_windows win ON win.wid = f.wid "
                  "WHERE f.ano = %(ano)s AND (win.wid IS NULL OR win.cold = 1 OR (win.needs_rebuild = 0 AND NOT EXISTS "
                  "(SELECT 1 FROM ss_events e WHERE e.id = f.id AND e.on_branch = 1 AND e.text IS NOT NULL))))",
            {"ano": self.ano})
        return sum(n for n, _ in gone.values())

    async def dirty_windows(self, conn) -> list[int]:
        return [r[0] for r in await all_rows(conn, "SELECT wid FROM ss_windows WHERE ano = %s AND needs_rebuild = 1 "
                                                   "ORDER BY wid", (self.ano,))]
