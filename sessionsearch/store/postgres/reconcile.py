"""Reconciliation on PostgreSQL: claims with a lease, the diff of a window's index rows against
its active branch, publishing against a generation, and coalescing small waiting windows.

indexer/reconcile.py decides, over these primitives (store.base.ReconcileTx). Everything that must
hold across worker processes on many hosts is decided under the window's row lock inside one
transaction: a claim is a compare-and-set of (claim_token, claim_expires_at)
against the database's clock; every batch renews the lease only while the token is still the
holder's (fencing: a holder whose lease was taken over writes nothing); publishing marks the
window clean only if its `rebuild_gen` is still the one the claim read (a non-linear append in
between bumps it). Small windows rebuilt beside another are picked with `FOR UPDATE SKIP LOCKED`,
so two workers never pick the same one and neither waits for the other.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from psycopg import AsyncConnection

from ..base import ClaimInfo, ReconcileTx, RowChanges, Waiting, WindowGen, WindowState
from ..rowids import seq_ranges, window_ranges
from .db import all_rows, now_s, one
from .meaning import PgEmbedTx
from .writer import delete_index, index_rows

T = TypeVar("T")
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
# and searches keep the server's other cores (figures: docs/architecture/decisions.md).
# Taken once every window row the transaction writes is locked (claimed, or picked beside), so a
# holder never waits on a waiter. Released at COMMIT or ROLLBACK, so safe behind PgBouncer.
SLOT_LOCK = 0x7263736C
TRY_SLOT = ("SELECT s FROM generate_series(0, %s - 1) AS s WHERE pg_try_advisory_xact_lock(%s, s::integer) "
            "LIMIT 1")


async def take_slot(conn: AsyncConnection, slots: int) -> None:
    """Hold a reconciliation slot until this transaction ends: a free one, else wait for one (0: no limit)."""
    if slots <= 0 or await one(conn, TRY_SLOT, (slots, SLOT_LOCK)) is not None:
        return
    await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (SLOT_LOCK, random.randrange(slots)))


# The ids of agent %(ano)s's orphan index rows: read first, then deleted by id (writer.py,
# DELETE_INDEX): as one statement, stale statistics made the planner's semi join quadratic
# (docs/architecture/decisions.md; tests/test_postgres_writers.py checks both plans).
ORPHANS = ("SELECT f.id FROM ss_index f LEFT JOIN ss_windows win ON win.wid = f.wid WHERE f.ano = %(ano)s AND "
           "(win.wid IS NULL OR win.cold = 1 OR (win.needs_rebuild = 0 AND NOT EXISTS "
           "(SELECT 1 FROM ss_events e WHERE e.id = f.id AND e.on_branch = 1 AND e.text IS NOT NULL)))")


class Reconciler:
    """The reconciliation of one agent: runs its steps in a transaction each; `rebuilding` tells
    this process's jobs which windows a running transaction is rebuilding beside another."""

    def __init__(self, ano: int, slots: int) -> None:
        self.ano = ano
        self.slots = slots  # diffs running at once against the database (take_slot; 0: no limit)
        self.rebuilding: frozenset[int] = frozenset()

    async def step(self, conn: AsyncConnection, step: Callable[[ReconcileTx], Awaitable[T]]) -> T:
        """Run `step` inside the transaction of `conn` (Db.tx: retried whole on a deadlock)."""
        tx = PgReconcileTx(self, conn)
        out = await step(tx)
        await tx.settle_embeds()
        return out

    async def sweep_orphans(self, conn: AsyncConnection) -> int:
        """Index rows whose window is gone or cold, or (clean windows) whose row left the branch."""
        ids = [row[0] for row in await all_rows(conn, ORPHANS, {"ano": self.ano})]
        if not ids:
            return 0
        gone = await delete_index(conn, ids)
        return sum(n for n, _ in gone.values())

    async def dirty_windows(self, conn: AsyncConnection) -> list[int]:
        return [r[0] for r in await all_rows(conn, "SELECT wid FROM ss_windows WHERE ano = %s AND needs_rebuild = 1 "
                                                   "ORDER BY wid", (self.ano,))]


class PgReconcileTx(PgEmbedTx):
    """The primitives inside one transaction; claims compare against the database's clock, read once."""

    def __init__(self, owner: Reconciler, conn: AsyncConnection) -> None:
        self.owner = owner
        self.conn = conn
        self.ano = owner.ano
        self.slots = owner.slots
        self._now: float | None = None
        self._finished = []

    async def now(self) -> float:
        if self._now is None:
            self._now = await now_s(self.conn)
        return self._now

    async def window_state(self, wid: int) -> WindowState | None:
        row = await one(self.conn, "SELECT needs_rebuild, claim_token IS NULL OR claim_expires_at < %s FROM ss_windows "
                                   "WHERE wid = %s AND ano = %s FOR UPDATE", (await self.now(), wid, self.ano))
        return None if row is None else WindowState(bool(row[0]), bool(row[1]))

    async def take_claim(self, wid: int, token: str, lease_s: float) -> ClaimInfo | None:
        now = await self.now()
        row = await one(self.conn, "UPDATE ss_windows SET claim_token = %s, claim_expires_at = %s "
                                   "WHERE wid = %s AND (claim_token IS NULL OR claim_expires_at < %s) "
                                   "RETURNING needs_rebuild, rebuild_gen, last_seq, cold",
                        (token, now + lease_s, wid, now))
        return None if row is None else ClaimInfo(bool(row[0]), row[1], row[2], bool(row[3]))

    async def renew_claim(self, wid: int, token: str, lease_s: float) -> bool:
        return await one(self.conn, "UPDATE ss_windows SET claim_expires_at = %s WHERE wid = %s AND claim_token = %s "
                                    "RETURNING 1", (await self.now() + lease_s, wid, token)) is not None

    async def drop_claim(self, wid: int, token: str) -> None:
        await self.conn.execute("UPDATE ss_windows SET claim_token = NULL, claim_expires_at = NULL "
                                "WHERE wid = %s AND claim_token = %s", (wid, token))

    async def waiting(self, wid: int, *, after: bool, max_rows: int, limit: int) -> list[Waiting]:
        cmp, order = (">", "ASC") if after else ("<", "DESC")
        rows = await all_rows(
            self.conn, f"SELECT wid, last_seq FROM ss_windows WHERE ano = %s AND needs_rebuild = 1 AND wid {cmp} %s "
                       f"AND cold = 0 AND claim_token IS NULL AND last_seq <= %s ORDER BY wid {order} LIMIT %s "
                       "FOR UPDATE SKIP LOCKED", (self.ano, wid, max_rows, limit))
        return [Waiting(other, n) for other, n in rows]

    def rebuilding(self, wids: frozenset[int]) -> None:
        self.owner.rebuilding = wids

    async def rebuild_whole(self, wids: list[int]) -> RowChanges:
        """Rebuild whole windows (locked by this transaction) in one diff and mark them clean."""
        if not wids:
            return RowChanges(0, 0)
        changes = await self._diff([r for wid in wids for r in window_ranges(wid)])
        await self.conn.execute("UPDATE ss_windows SET needs_rebuild = 0, indexed_seq = last_seq, "
                                "indexed_leaf = leaf_seq WHERE wid = ANY(%s)", (wids,))
        return changes

    async def diff(self, wid: int, first_seq: int, last_seq: int) -> RowChanges:
        return await self._diff(seq_ranges(wid, first_seq, last_seq))

    async def mark_published(self, wid: int, token: str, rebuild_gen: int) -> bool:
        return await one(self.conn, "UPDATE ss_windows SET needs_rebuild = 0, indexed_seq = last_seq, "
                                    "indexed_leaf = leaf_seq, claim_token = NULL, claim_expires_at = NULL "
                                    "WHERE wid = %s AND claim_token = %s AND rebuild_gen = %s RETURNING 1",
                         (wid, token, rebuild_gen)) is not None

    async def holds_claim(self, wid: int, token: str) -> bool:
        return await one(self.conn, "SELECT 1 FROM ss_windows WHERE wid = %s AND claim_token = %s",
                         (wid, token)) is not None

    async def window_gen(self, wid: int) -> WindowGen | None:
        row = await one(self.conn, "SELECT rebuild_gen, last_seq, needs_rebuild FROM ss_windows "
                                   "WHERE wid = %s AND ano = %s", (wid, self.ano))
        return WindowGen(row[0], row[1], bool(row[2])) if row else None

    async def index_changed(self) -> None:
        """Nothing to tell: searches read which windows need work in their own snapshot."""

    def contended(self) -> bool:
        return False  # no agent-wide write lock to contend for

    async def _diff(self, ranges: list[tuple[int, int]]) -> RowChanges:
        """Make the index rows of the id `ranges` match the active branch; (deleted, inserted).

        Two round trips for any number of windows: the stale index rows deleted and the rows
        to index read in one pipeline, their index rows written and every window's counters
        moved in another."""
        params = {"lo": [lo for lo, _ in ranges], "hi": [hi for _, hi in ranges]}
        conn = self.conn
        await take_slot(conn, self.slots)
        async with conn.pipeline():
            # by the ids' index, always: after an import the planner, unaware of its rows, scanned them
            # all. Each range is a LATERAL subquery, so it can only be read as an index range scan;
            # no JIT: the estimates of those loops pass jit_above_cost (docs/architecture/decisions.md).
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
        counts: dict[int, list[int]] = {wid: [-n, -int(t)] for wid, n, t in await gone.fetchall()}
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
            if added:  # the new rows wait for the embed job
                await conn.execute("UPDATE ss_windows SET needs_embed = 1 WHERE wid = ANY(%s)", (list(added),))
            if counts:
                await conn.execute("UPDATE ss_windows w SET idx_rows = idx_rows + c.n, idx_tokens = idx_tokens + c.t "
                                   "FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS c(wid, n, t) "
                                   "WHERE w.wid = c.wid", (list(counts), [n for n, _ in counts.values()],
                                                          [t for _, t in counts.values()]))
        return RowChanges(deleted, sum(n for n, _ in added.values()))
