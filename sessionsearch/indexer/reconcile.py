"""Reconciliation: rebuild one window's index rows from its active branch.

claim (lease) -> batches that re-check the claim, each diffing index rows against the branch in one
write transaction -> publish only if no non-linear write came meanwhile -> release. Idempotent;
safe on many workers at once (a batch computes its diff inside its transaction, so two holders can
never both insert a row), and an expired claim is taken over.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import structlog

from ..store.base import AgentStore
from ..store.rowids import MAX_SEQ

log = structlog.get_logger("sessionsearch.reconcile")

MAX_ROUNDS = 5


@dataclass(slots=True)
class ReconcileResult:
    outcome: str  # published | clean | beside | busy | lost | missing | changed | cold | stopped
    rows_deleted: int = 0
    rows_inserted: int = 0
    batches: int = 0
    seconds: float = 0.0
    beside: list[int] = field(default_factory=list)  # small windows published in the same transaction


async def reconcile_window(store: AgentStore, wid: int, *, batch_rows: int = 5000,
                           lease_s: float = 60.0, token: str | None = None,
                           should_stop=None, more_s: float = 0.0) -> ReconcileResult:
    """Rebuild window `wid`'s index rows from its active branch, under a claim.

    `should_stop()` is asked between batches (a worker shutting down): the claim is released and
    the outcome is "stopped", leaving the window marked for a later job.

    `more_s`: once its own window is published, the job goes on rebuilding the small windows
    waiting next to it, a transaction at a time, until that much time has passed (see
    `_reconcile_more`); they are reported in `beside` with those of its own transaction.
    """
    started = time.monotonic()
    token = token or uuid.uuid4().hex
    result = ReconcileResult("clean")
    if store.rebuilding_beside(wid):
        # Another job of this process is rebuilding it, in the transaction running now. Waiting
        # for that commit would hold this worker thread, and the jobs queued behind this one, while
        # the writer runs: measured, the writer then idled half the time between transactions. If
        # that transaction fails, its job is retried and picks this window again, or the next search
        # queues it again (this job's marker is cleared as it ends).
        result.outcome = "beside"
        return _done(store, wid, result, started)
    if await store.is_clean(wid):
        return _done(store, wid, result, started)
    # a window of up to one batch is claimed, rebuilt and published in a single transaction
    outcome, claim, deleted, inserted, beside = await store.claim_and_reconcile_small(wid, token, lease_s, batch_rows)
    if outcome != "claimed":
        result.outcome, result.rows_deleted, result.rows_inserted = outcome, deleted, inserted
        result.beside = beside
        result.batches = 1 if outcome == "published" else 0
        if outcome == "published" and more_s > 0:
            await _reconcile_more(store, wid, result, batch_rows, started + more_s, should_stop)
        return _done(store, wid, result, started)
    log.info("reconcile.claimed", agent=store.agent_id, wid=wid, rows=claim.last_seq)
    try:
        gen, last_seq = claim.rebuild_gen, claim.last_seq
        for _round in range(MAX_ROUNDS):
            first = 0
            # the last batch runs to the end of the id range, sweeping any stray rows past last_seq
            while True:
                if should_stop is not None and should_stop():
                    await store.release(wid, token)
                    result.outcome = "stopped"
                    return _done(store, wid, result, started)
                end = first + batch_rows - 1
                final = end >= last_seq
                changed = await store.reconcile_batch(wid, token, first, MAX_SEQ if final else end, lease_s)
                if changed is None:
                    result.outcome = "lost"
                    return _done(store, wid, result, started)
                result.rows_deleted += changed[0]
                result.rows_inserted += changed[1]
                result.batches += 1
                if final:
                    break
                first = end + 1
            outcome = await store.publish(wid, token, gen)
            if outcome != "changed":
                result.outcome = outcome
                return _done(store, wid, result, started)
            state = await store.window_gen(wid)
            if state is None:
                result.outcome = "missing"
                await store.release(wid, token)
                return _done(store, wid, result, started)
            gen, last_seq, _ = state
        result.outcome = "changed"
        await store.release(wid, token)
        return _done(store, wid, result, started)
    except BaseException:
        await _release_quietly(store, wid, token)
        raise


async def _reconcile_more(store: AgentStore, wid: int, result: ReconcileResult, batch_rows: int,
                          until: float, should_stop) -> None:
    """Rebuild the small windows waiting after `wid` until `until` (monotonic s).

    Jobs go through the queue one at a time: after a job has rebuilt its window and those beside
    it, the writer would wait while the jobs of the windows it just published go through the
    queue (finding them clean) before the next window needing work comes up; measured, that was
    half of the writer's time. Going on from here keeps the writer busy while other threads
    clear those jobs; the windows this publishes are then found clean (or being rebuilt) by theirs.
    It stops early when its transaction had to wait for another process's writer: two processes
    taking turns at one database's lock lose time to the lock's waits (measured, two worker
    processes on one agent were slower than one); their queued jobs still cover every window.
    """
    last = max([wid, *result.beside])
    while time.monotonic() < until and not (should_stop is not None and should_stop()):
        picked, deleted, inserted, contended = await store.reconcile_next(last, batch_rows)
        if not picked:
            return
        result.beside += picked
        result.rows_deleted += deleted
        result.rows_inserted += inserted
        result.batches += 1
        last = max(picked)
        if contended:
            return


async def _release_quietly(store: AgentStore, wid: int, token: str) -> None:
    try:
        await store.release(wid, token)
    except Exception:  # the lease expires on its own; a later job takes over
        log.warning("reconcile.release_failed", agent=store.agent_id, wid=wid)


def _done(store: AgentStore, wid: int, result: ReconcileResult, started: float) -> ReconcileResult:
    result.seconds = time.monotonic() - started
    event = "reconcile.published" if result.outcome == "published" else "reconcile.skipped"
    log.info(event, agent=store.agent_id, wid=wid, outcome=result.outcome, rows_inserted=result.rows_inserted,
             rows_deleted=result.rows_deleted, batches=result.batches, beside=len(result.beside),
             seconds=round(result.seconds, 4))
    return result
