"""Reconciliation: rebuild one window's index rows from its active branch.

claim (lease) -> batches that re-check the claim, each diffing index rows against the branch in one
write transaction -> publish only if no non-linear write came meanwhile -> release. Idempotent;
safe on many workers at once (a batch computes its diff inside its transaction, so two holders can
never both insert a row), and an expired claim is taken over. Every decision is made here, once,
over the primitives each backend gives one transaction (store.base.ReconcileTx).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from ..store.base import (
    AgentStore,
    BesideBatch,
    ClaimInfo,
    ReconcileOutcome,
    ReconcileTx,
    RowChanges,
    SmallReconcile,
    WindowGen,
)
from ..store.rowids import MAX_SEQ

log = structlog.get_logger("sessionsearch.reconcile")

MAX_ROUNDS = 5
COALESCE_WINDOWS = 64  # most windows one reconciliation transaction rebuilds

Outcome = ReconcileOutcome


# -- one transaction each ---------------------------------------------------------------------

async def _claim_small(tx: ReconcileTx, wid: int, token: str, lease_s: float, max_rows: int) -> SmallReconcile:
    """Claim; a window of at most `max_rows` rows is rebuilt and published in the same transaction,
    with other small unclaimed windows waiting beside it while the rows last. CLAIMED: the window
    is larger and the claim is held for batches; CLEAN: indexed and unclaimed, nothing written."""
    state = await tx.window_state(wid)
    if state is None:
        return SmallReconcile(Outcome.MISSING, None, 0, 0, ())
    if not state.needs_rebuild and state.claim_free:  # reconciled meanwhile (perhaps beside another window)
        return SmallReconcile(Outcome.CLEAN, None, 0, 0, ())
    claim = await tx.take_claim(wid, token, lease_s)
    if claim is None:
        return SmallReconcile(Outcome.BUSY, None, 0, 0, ())
    if claim.needs_rebuild and not claim.cold and claim.last_seq > max_rows:
        return SmallReconcile(Outcome.CLAIMED, claim, 0, 0, ())
    changes = RowChanges(0, 0)
    beside: tuple[int, ...] = ()
    if claim.needs_rebuild and not claim.cold:
        # Each job pays a queue round trip and a commit: small windows waiting beside this one are
        # rebuilt in the same transaction, and their own jobs then find them clean.
        beside = await _waiting_beside(tx, wid, max_rows - claim.last_seq)
        changes = await _rebuild(tx, [wid], beside)
    await tx.drop_claim(wid, token)
    outcome = Outcome.COLD if claim.cold else (Outcome.PUBLISHED if claim.needs_rebuild else Outcome.CLEAN)
    return SmallReconcile(outcome, claim, changes.deleted, changes.inserted, beside)


async def _next_beside(tx: ReconcileTx, after: int, max_rows: int) -> BesideBatch:
    """Rebuild and publish small unclaimed windows waiting next after window `after` (else before
    it), up to `max_rows` rows; no windows when none is waiting."""
    picked = await _waiting_beside(tx, after, max_rows)
    changes = await _rebuild(tx, [], picked) if picked else RowChanges(0, 0)
    return BesideBatch(picked, changes.deleted, changes.inserted, tx.contended())


async def _waiting_beside(tx: ReconcileTx, wid: int, budget: int) -> tuple[int, ...]:
    """Small windows waiting next to `wid` (after it first, the order jobs are sent in) whose rows
    together fit `budget`."""
    picked: list[int] = []
    for after in (True, False):
        for other in await tx.waiting(wid, after=after, max_rows=budget, limit=COALESCE_WINDOWS - len(picked)):
            if other.rows > budget:
                continue
            budget -= other.rows
            picked.append(other.wid)
        if len(picked) >= COALESCE_WINDOWS:
            break
    return tuple(picked)


async def _rebuild(tx: ReconcileTx, own: list[int], beside: tuple[int, ...]) -> RowChanges:
    """Rebuild whole windows and publish them; this process's jobs of `beside` are told so."""
    tx.rebuilding(frozenset(beside))
    changes = await tx.rebuild_whole([*own, *beside])
    await tx.index_changed()
    return changes


async def _batch(tx: ReconcileTx, wid: int, token: str, first_seq: int, last_seq: int,
                 lease_s: float) -> RowChanges | None:
    if not await tx.renew_claim(wid, token, lease_s):
        return None
    return await tx.diff(wid, first_seq, last_seq)


async def _publish(tx: ReconcileTx, wid: int, token: str, rebuild_gen: int) -> ReconcileOutcome:
    if await tx.mark_published(wid, token, rebuild_gen):
        await tx.index_changed()
        return Outcome.PUBLISHED
    return Outcome.CHANGED if await tx.holds_claim(wid, token) else Outcome.LOST


# -- the steps as the store runs them -----------------------------------------------------------

async def claim_small(store: AgentStore[Any], wid: int, token: str, lease_s: float, max_rows: int) -> SmallReconcile:
    """See _claim_small: one transaction."""
    return await store.reconcile_tx(lambda tx: _claim_small(tx, wid, token, lease_s, max_rows))


async def claim(store: AgentStore[Any], wid: int, token: str, lease_s: float) -> ClaimInfo | None:
    """Take the window's claim if free or expired; None when another holder's lease is live."""
    return await store.reconcile_tx(lambda tx: tx.take_claim(wid, token, lease_s))


async def reconcile_batch(store: AgentStore[Any], wid: int, token: str, first_seq: int, last_seq: int,
                          lease_s: float) -> RowChanges | None:
    """Make the index rows of seqs first..last match the active branch while the claim is ours,
    renewing its lease; None when the claim was lost. The diff is computed inside the
    transaction, so two holders can never both insert a row."""
    return await store.reconcile_tx(lambda tx: _batch(tx, wid, token, first_seq, last_seq, lease_s))


async def publish(store: AgentStore[Any], wid: int, token: str, rebuild_gen: int) -> ReconcileOutcome:
    """Mark the window indexed if the claim is ours and its generation unchanged: PUBLISHED,
    CHANGED (a non-linear write came meanwhile: go round again) or LOST."""
    return await store.reconcile_tx(lambda tx: _publish(tx, wid, token, rebuild_gen))


async def release(store: AgentStore[Any], wid: int, token: str) -> None:
    """Drop the claim if it is still ours."""
    await store.reconcile_tx(lambda tx: tx.drop_claim(wid, token))


async def window_gen(store: AgentStore[Any], wid: int) -> WindowGen | None:
    """The window's rebuild generation, last seq and need, as last committed; None when it is gone."""
    return await store.reconcile_tx(lambda tx: tx.window_gen(wid))


async def reconcile_next(store: AgentStore[Any], after: int, max_rows: int) -> BesideBatch:
    """See _next_beside: one transaction."""
    return await store.reconcile_tx(lambda tx: _next_beside(tx, after, max_rows))


# -- a job --------------------------------------------------------------------------------------

@dataclass(slots=True)
class ReconcileResult:
    outcome: ReconcileOutcome
    rows_deleted: int = 0
    rows_inserted: int = 0
    batches: int = 0
    seconds: float = 0.0
    beside: list[int] = field(default_factory=list)  # small windows published in the same transaction


async def reconcile_window(store: AgentStore[Any], wid: int, *, batch_rows: int = 5000,
                           lease_s: float = 60.0, token: str | None = None,
                           should_stop: Callable[[], bool] | None = None, more_s: float = 0.0) -> ReconcileResult:
    """Rebuild window `wid`'s index rows from its active branch, under a claim.

    `should_stop()` is asked between batches (a worker shutting down): the claim is released and
    the outcome is "stopped", leaving the window marked for a later job.

    `more_s`: once its own window is published, the job goes on rebuilding the small windows
    waiting next to it, a transaction at a time, until that much time has passed (see
    `_reconcile_more`); they are reported in `beside` with those of its own transaction.
    """
    started = time.monotonic()
    token = token or uuid.uuid4().hex
    result = ReconcileResult(Outcome.CLEAN)
    if store.rebuilding_beside(wid):
        # Another job of this process is rebuilding it, in the transaction running now: waiting for
        # that commit would idle the writer between transactions (docs/architecture/decisions.md).
        # If that transaction fails, its job is retried and picks this window again, or the next
        # search queues it again (this job's marker is cleared as it ends).
        result.outcome = Outcome.BESIDE
        return _done(store, wid, result, started)
    if await store.is_clean(wid):
        return _done(store, wid, result, started)
    # a window of up to one batch is claimed, rebuilt and published in a single transaction
    small = await claim_small(store, wid, token, lease_s, batch_rows)
    claimed = small.claim
    if small.outcome != Outcome.CLAIMED or claimed is None:
        result.outcome, result.rows_deleted, result.rows_inserted = small.outcome, small.deleted, small.inserted
        result.beside = list(small.beside)
        result.batches = 1 if small.outcome == Outcome.PUBLISHED else 0
        if small.outcome == Outcome.PUBLISHED and more_s > 0:
            await _reconcile_more(store, wid, result, batch_rows, started + more_s, should_stop)
        return _done(store, wid, result, started)
    log.info("reconcile.claimed", agent=store.agent_id, wid=wid, rows=claimed.last_seq)
    try:
        gen, last_seq = claimed.rebuild_gen, claimed.last_seq
        for _round in range(MAX_ROUNDS):
            first = 0
            # the last batch runs to the end of the id range, sweeping any stray rows past last_seq
            while True:
                if should_stop is not None and should_stop():
                    await release(store, wid, token)
                    result.outcome = Outcome.STOPPED
                    return _done(store, wid, result, started)
                end = first + batch_rows - 1
                final = end >= last_seq
                changed = await reconcile_batch(store, wid, token, first, MAX_SEQ if final else end, lease_s)
                if changed is None:
                    result.outcome = Outcome.LOST
                    return _done(store, wid, result, started)
                result.rows_deleted += changed.deleted
                result.rows_inserted += changed.inserted
                result.batches += 1
                if final:
                    break
                first = end + 1
            outcome = await publish(store, wid, token, gen)
            if outcome != Outcome.CHANGED:
                result.outcome = outcome
                return _done(store, wid, result, started)
            state = await window_gen(store, wid)
            if state is None:
                result.outcome = Outcome.MISSING
                await release(store, wid, token)
                return _done(store, wid, result, started)
            gen, last_seq = state.rebuild_gen, state.last_seq
        result.outcome = Outcome.CHANGED
        await release(store, wid, token)
        return _done(store, wid, result, started)
    except BaseException:
        await _release_quietly(store, wid, token)
        raise


async def _reconcile_more(store: AgentStore[Any], wid: int, result: ReconcileResult, batch_rows: int,
                          until: float, should_stop: Callable[[], bool] | None) -> None:
    """Rebuild the small windows waiting after `wid` until `until` (monotonic s).

    Jobs go through the queue one at a time: after a job has rebuilt its window and those beside
    it, the writer would wait while the jobs of the windows it just published go through the
    queue (finding them clean) before the next window needing work comes up. Going on from here
    keeps the writer busy while other threads clear those jobs; the windows this publishes are
    then found clean (or being rebuilt) by theirs. It stops early when its transaction had to
    wait for another process's writer: two processes taking turns at one database's lock lose
    time to the lock's waits; their queued jobs still cover every window (figures:
    docs/architecture/decisions.md).
    """
    last = max([wid, *result.beside])
    while time.monotonic() < until and not (should_stop is not None and should_stop()):
        done = await reconcile_next(store, last, batch_rows)
        if not done.windows:
            return
        result.beside += done.windows
        result.rows_deleted += done.deleted
        result.rows_inserted += done.inserted
        result.batches += 1
        last = max(done.windows)
        if done.contended:
            return


async def _release_quietly(store: AgentStore[Any], wid: int, token: str) -> None:
    try:
        await release(store, wid, token)
    except Exception:  # the lease expires on its own; a later job takes over
        log.warning("reconcile.release_failed", agent=store.agent_id, wid=wid)


def _done(store: AgentStore[Any], wid: int, result: ReconcileResult, started: float) -> ReconcileResult:
    result.seconds = time.monotonic() - started
    event = "reconcile.published" if result.outcome == Outcome.PUBLISHED else "reconcile.skipped"
    log.info(event, agent=store.agent_id, wid=wid, outcome=str(result.outcome), rows_inserted=result.rows_inserted,
             rows_deleted=result.rows_deleted, batches=result.batches, beside=len(result.beside),
             seconds=round(result.seconds, 4))
    return result
