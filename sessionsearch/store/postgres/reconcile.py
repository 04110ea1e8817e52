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

import random

from ..base import ClaimInfo
from ..rowids import seq_ranges, window_ranges
from .db import all_rows, now_s, one
from .writer import delete_index, index_rows

COALESCE_WINDOWS = 64  # most windows one reconciliation transaction rebuilds
# A diff's index rows go into the GIN index's pending list up to this many kB, which the diff then
# moves into the tree at once (gin_clean_pending_list): sorted by lexeme, a lexeme's new rows go
# in together, where the 64 kB every other writer keeps moved the list every ~200 rows. Searches
# read the list whole while it is there (a few ms for 1 MB). Only the index's owner may move it:
# for another role the limit stays 64 kB.
BULK_PENDING_KB = 1024
_OWNED = "FROM pg_class WHERE oid = 'ss_index_tsv'::regclass AND pg_has_role(relowner, 'USAGE')"
BULK_PENDING = f"SELECT set_config('gin_pending_list_limit', '{BULK_PENDING_KB}', true) {_OWNED}"
MOVE_PENDING = f"SELECT gin_clean_pending_list(oid) {_OWNED}"
# the id ranges a diff covers, as a relation r(lo, hi): one statement for any number of windows
RANGES = "unnest(%(lo)s::bigint[], %(hi)s::bigint[]) AS r(lo, hi)"
# A reconciliation transaction's diff (its reads, the tokenizing, its index writes) holds one of
# `slots` transaction-level advisory locks (key space "rcsl", the slot as the second key), so at
# most that many diffs run at once against the database, from every worker process on every host,
# and searches keep the server's other cores: measured on 2 cores (1 GB shared_buffers), searches of
# another agent during a 200,000-message reconciliation by 3 workers went from 2.4-2.5x their idle
# p95 (no limit) to 1.3-1.9x with one slot, the reconciliation ~30% slower
# (docs/performance/postgres.md, "slots").
# Taken once every window row the transaction writes is locked (claimed, or picked beside), so a
# holder never waits on a waiter. Released at COMMIT or ROLLBACK, so safe behind PgBouncer.
SLOT_LOCK = 0x7263736C
TRY_SLOT = ("SELECT s FROM generate_series(0, %s - 1) AS s WHERE pg_try_advisory_xact_lock(%s, s::integer) "
            "LIMIT 1")


async def take_slot(conn, slots: int) -> None:
    """Hold a reconciliation slot until this transaction ends: a free one, else wait for one (0: no limit)."""
    if slots <= 0 or await one(conn, TRY_SLOT, (slots, SLOT_LOCK)) is not None:
        return
    await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (SLOT_LOCK, random.randrange(slots)))


async def _claim(conn, wid: int, token: str, lease_s: float, now: float) -> ClaimInfo | None:
    row = await one(conn, "UPDATE ss_windows SET claim_token = %s, claim_expires_at = %s "
                          "WHERE wid = %s AND (claim_token IS NULL OR claim_expires_at < %s) "
                          "RETURNING needs_rebuild, rebuild_gen, last_seq, cold", (token, now + lease_s, wid, now))
    return None if row is None else ClaimInfo(bool(row[0]), row[1], row[2], bool(row[3]))



# The ids of agent %(ano)s's orphan index rows: read first, then deleted by id (writer.py,
# DELETE_INDEX). As one statement, `DELETE … WHERE id IN (<this>)`, with statistics from before an
# import (the agent estimated at one row) the planner chose a nested-loop semi join that ran this
# query again for each of the agent's index rows: quadratic (a 40,000-row agent: over six minutes
# of CPU, unfinished) in every worker's startup sweep at once (tests/test_postgres_writers.py checks both plans).
ORPHANS = ("SELECT f.id FROM ss_index f LEFT JOIN ss_windows win ON win.wid = f.wid WHERE f.ano = %(ano)s AND "
           "(win.wid IS NULL OR win.cold = 1 OR (win.needs_rebuild = 0 AND NOT EXISTS "
           "(SELECT 1 FROM ss_events e WHERE e.id = f.id AND e.on_branch = 1 AND e.text IS NOT NULL)))")

class ReconcileWrites:
    """The reconciliation transactions of one agent; `rebuilding` tells this process's jobs which
    windows a running transaction is rebuilding beside another."""

    def __init__(self, ano: int, slots: int) -> None:
        self.ano = ano
        self.slots = slots  # diffs running at once against the database (take_slot; 0: no limit)
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
            beside = await self._waiting_beside(conn, wid, max_rows - claim.last_seq)
            self.rebuilding = frozenset(beside)
            deleted, inserted = await self._rebuild_whole(conn, [wid, *beside])
        await conn.execute("UPDATE ss_windows SET claim_token = NULL, claim_expires_at = NULL WHERE wid = %s", (wid,))
        outcome = "cold" if claim.cold else ("published" if claim.needs_rebuild else "clean")
        return outcome, claim, deleted, inserted, beside

    async def reconcile_next(self, conn, after: int, max_rows: int) -> tuple[list[int], int, int, bool]:
        picked = await self._waiting_beside(conn, after, max_rows)
        self.rebuilding = frozenset(picked)
        deleted, inserted = await self._rebuild_whole(conn, picked)
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

    async def _rebuild_whole(self, conn, wids: list[int]) -> tuple[int, int]:
        """Rebuild whole windows (locked by this transaction) and mark them clean."""
        if not wids:
            return 0, 0
        deleted, inserted = await self._diff(conn, [r for wid in wids for r in window_ranges(wid)])
        await conn.execute("UPDATE ss_windows SET needs_rebuild = 0, indexed_seq = last_seq, indexed_leaf = leaf_seq "
                           "WHERE wid = ANY(%s)", (wids,))
        return deleted, inserted

    async def _diff(self, conn, ranges: list[tuple[int, int]]) -> tuple[int, int]:
        """Make the index rows of the id `ranges` match the active branch; (deleted, inserted).

        Two round trips for any number of windows: the stale index rows deleted and the rows
        to index read in one pipeline, their index rows written and every window's counters
        moved in another (measured, a statement per window and range was most of the time)."""
        params = {"lo": [lo for lo, _ in ranges], "hi": [hi for _, hi in ranges]}
        await take_slot(conn, self.slots)
        async with conn.pipeline():
            # by the ids' index, always: after an import the planner, unaware of its rows, scanned them all.
            # Each range is a LATERAL subquery, so it can only be read as an index range scan: joined
            # on `BETWEEN`, the planner (once ss_events was analyzed) scanned every row of the table
            # against every range, per batch (2.7 s against 0.07 s for 64 windows at 50,000 rows).
            # No JIT: the estimates of those loops pass jit_above_cost, and compiling cost 10-15 ms.
            await conn.execute("SET LOCAL enable_seqscan = off")
            await conn.execute("SET LOCAL jit = off")
            gone = await conn.execute(
                "WITH d AS (DELETE FROM ss_index WHERE id IN (SELECT i.id FROM " + RANGES + " CROSS JOIN LATERAL "
                "(SELECT i.id FROM ss_index i WHERE i.id BETWEEN r.lo AND r.hi AND NOT EXISTS (SELECT 1 FROM "
                "ss_events e WHERE e.id = i.id AND e.on_branch = 1 AND e.text IS NOT NULL)) i) RETURNING wid, dl) "
                "SELECT wid, count(*), coalesce(sum(dl), 0) FROM d GROUP BY wid", params)
            todo = await conn.execute(
                "SELECT e.id, e.wid, e.text, e.ts, e.event_id FROM " + RANGES + " CROSS JOIN LATERAL "
                "(SELECT e.id, e.wid, e.text, e.ts, e.event_id FROM ss_events e WHERE e.id BETWEEN r.lo AND r.hi "
                "AND e.on_branch = 1 AND e.text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ss_index i WHERE "
                "i.id = e.id)) e ORDER BY e.id", params)
        counts = {wid: [-n, -int(t)] for wid, n, t in await gone.fetchall()}
        deleted = -sum(n for n, _ in counts.values())
        insert, added = index_rows(self.ano, await todo.fetchall())
        for wid, (n, t) in added.items():
            count = counts.setdefault(wid, [0, 0])
            count[0] += n
            count[1] += t
        async with conn.pipeline():
            if added:
                await conn.execute(BULK_PENDING)
                await conn.execute(*insert)
                await conn.execute(MOVE_PENDING)
                await conn.execute("SET LOCAL gin_pending_list_limit = 64")
            if counts:
                await conn.execute("UPDATE ss_windows w SET idx_rows = idx_rows + c.n, idx_tokens = idx_tokens + c.t "
                                   "FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS c(wid, n, t) "
                                   "WHERE w.wid = c.wid", (list(counts), [n for n, _ in counts.values()],
                                                          [t for _, t in counts.values()]))
        return deleted, sum(n for n, _ in added.values())

    async def reconcile_batch(self, conn, wid: int, token: str, first_seq: int, last_seq: int,
                              lease_s: float) -> tuple[int, int] | None:
        now = await now_s(conn)
        if await one(conn, "UPDATE ss_windows SET claim_expires_at = %s WHERE wid = %s AND claim_token = %s "
                           "RETURNING 1", (now + lease_s, wid, token)) is None:
            return None
        return await self._diff(conn, seq_ranges(wid, first_seq, last_seq))

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
        ids = [row[0] for row in await all_rows(conn, ORPHANS, {"ano": self.ano})]
        if not ids:
            return 0
        gone = await delete_index(conn, ids)
        return sum(n for n, _ in gone.values())

    async def dirty_windows(self, conn) -> list[int]:
        return [r[0] for r in await all_rows(conn, "SELECT wid FROM ss_windows WHERE ano = %s AND needs_rebuild = 1 "
                                                   "ORDER BY wid", (self.ano,))]
