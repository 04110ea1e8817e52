"""A worker's sweeps: windows needing reconciliation that no job will reach are sent again.

Searches queue what they meet, but a window can be left dirty with no job on its way: Redis
restarted empty, a send that failed, a marker whose job was lost, an import nobody has searched
yet. `sessionsearch worker` sweeps at startup (and drops orphan index rows then), and every
`reconcile_sweep_every_s` after that on a thread of its own. A periodic sweep asks each agent
database for its dirty windows (a partial index: nothing to read when nothing is dirty) and talks
to Redis only when there are some. Redis being down only delays a sweep: it is logged and tried
again, while Dramatiq's consumers reconnect on their own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import structlog

from ..engine import Engine
from ..indexer.reconcile import window_gen
from ..queue.broker import (
    BACKGROUND_TIMEOUT_S,
    EMBED_QUEUE,
    failing_windows,
    forget_failing,
    pending_jobs,
    unfinished_jobs,
)
from ..settings import Settings

if TYPE_CHECKING:
    from ..queue.actors import Reconciler

log = structlog.get_logger("sessionsearch.worker")

RETRY_S = 2.0  # after a failed sweep (Redis down), the next try comes this soon, or at the next period if sooner


class Sweeper:
    """The startup sweep, then periodic ones, on a thread with its own event loop and engine."""

    def __init__(self, settings: Settings, reconciler: Reconciler) -> None:
        self.settings = settings
        self.reconciler = reconciler
        self.every_s = settings.reconcile_sweep_every_s
        self.first_try = threading.Event()  # set once the startup sweep has been tried (it may have failed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._engine: Engine | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sessionsearch-sweep", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        started = False
        try:
            while not self._stop.is_set():
                try:
                    if not started:
                        log.info("worker.sweep", **loop.run_until_complete(self.startup()))
                        started = True
                    else:
                        result = loop.run_until_complete(self.periodic())
                        if result["enqueued"] or result["embedWindows"]:
                            log.info("worker.sweep", **result)
                        if result.get("failing"):  # every period: an operator has to look at them
                            log.warning("worker.sweep_failing", windows=result["failing"],
                                        sample=result["failingWindows"],
                                        why="their reconcile job was dead-lettered and they have not changed "
                                        "since; a change or a worker restart sends them again")
                    wait = self.every_s
                except Exception as exc:  # Redis down or hung, mostly: the sweep is tried again
                    wait = min(RETRY_S, self.every_s) if self.every_s > 0 else RETRY_S
                    log.warning("worker.sweep_failed", startup=not started, error=f"{type(exc).__name__}: {exc}",
                                retry_in_s=wait)
                self.first_try.set()
                if started and self.every_s <= 0:
                    break
                self._stop.wait(wait)
        finally:
            self.first_try.set()
            loop.run_until_complete(self.aclose())
            loop.close()

    async def aclose(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await engine.close()

    async def engine(self) -> Engine:
        if self._engine is None:
            self._engine = await Engine(settings=self.settings).open()
        return self._engine

    async def startup(self) -> dict[str, int]:
        """Enqueue every window still needing reconciliation that has no job waiting; drop orphan index rows."""
        began = time.time()
        engine = await self.engine()
        pending = await engine.pending()
        swept = await engine.sweep_orphans()
        # A window whose job still waits in the queue needs nothing more; any other is sent again even
        # if its marker says queued: a job taken by a worker killed mid-job would otherwise come back
        # only after Dramatiq's heartbeat timeout, and a duplicate is harmless under the claim. Not
        # a window marked since this sweep began: another process (a worker starting beside this
        # one) has just sent its job. Three workers started together after an import each sent every
        # window, and the 4,000 duplicate jobs of 2,000 windows cost more than the reconciliation.
        queued = pending_jobs(self.reconciler.broker)
        dirty = {agent: {w for w in wids if (agent, w) not in queued} for agent, wids in pending.items()}
        dirty = {agent: wids for agent, wids in dirty.items() if wids}
        sent, _ = self.reconciler.enqueue_sync(dirty, set_before=began) if dirty else (0, 0)
        return {"pending": sum(len(w) for w in pending.values()), "enqueued": sent,
                "alreadyQueued": sum(len(w) for w in pending.values()) - sent, "swept": swept,
                **await self._embed_backlog(engine, began=began)}

    async def _embed_backlog(self, engine: Engine, *, began: float | None = None) -> dict[str, int]:
        """Queue the embed job of every window waiting for embeddings that no job will reach, so
        the meaning index catches up after a restart, a model change or live appends without
        waiting for a semantic search to meet it. An incognito session's windows never wait (no
        embedder is given their text): no sweep sends them.

        As for reconciliation, a marker does not prove a job: a worker killed mid-job leaves its
        window's marker for MARKER_TTL_S and its claim until the lease runs out. The startup sweep
        (`began`) sends every waiting window with no job in the queue, taking over the markers set
        before it began; a periodic one every waiting window with no job sent and unfinished
        (`force`: waiting, delayed or taken by a live worker is left alone). The job then takes
        the expired claim over (indexer/embedding.py). Without Redis the markers are the process's
        own and are trusted."""
        backlog = {agent: set(wids) for agent, wids in (await engine.embed_backlog()).items() if wids}
        waiting = sum(len(w) for w in backlog.values())
        if not backlog:
            return {"embedWindows": 0}
        broker = self.reconciler.broker

        def send() -> int:
            if self.reconciler.embed_markers.client is None:
                return int(self.reconciler.enqueue_embed_sync(backlog))
            if began is not None:
                queued = pending_jobs(broker, EMBED_QUEUE)
                lost = {a: {w for w in wids if (a, w) not in queued} for a, wids in backlog.items()}
                return int(self.reconciler.enqueue_embed_sync({a: w for a, w in lost.items() if w},
                                                              set_before=began))
            unfinished = unfinished_jobs(broker, EMBED_QUEUE)
            lost = {a: {w for w in wids if (a, w) not in unfinished} for a, wids in backlog.items()}
            return int(self.reconciler.enqueue_embed_sync({a: w for a, w in lost.items() if w}, force=True))

        # bounded, on a thread: a hung Redis holds neither this sweep nor the worker's stop behind
        # its calls' timeouts (the reconcile part and the next period try again)
        try:
            sent = await asyncio.wait_for(asyncio.to_thread(send), BACKGROUND_TIMEOUT_S)
        except TimeoutError:
            log.warning("worker.embed_sweep_timed_out", windows=waiting)
            sent = 0
        return {"embedWindows": waiting, "embedEnqueued": sent}

    async def periodic(self) -> dict[str, Any]:
        """Enqueue the windows needing reconciliation with no job waiting, delayed or taken by a worker,
        and the embed jobs of windows waiting for embeddings."""
        started = time.monotonic()
        engine = await self.engine()
        # live appends leave rows waiting for embeddings with no job sent (the append path never
        # waits on the queue): each period sends their windows' embed jobs, deduplicated by markers
        embed = await self._embed_backlog(engine)
        pending = {agent: wids for agent, wids in (await engine.pending()).items() if wids}
        if not pending:
            return {"pending": 0, "enqueued": 0, **embed}
        unfinished = unfinished_jobs(self.reconciler.broker)
        missing = {agent: {w for w in wids if (agent, w) not in unfinished} for agent, wids in pending.items()}
        failing = await self._hold_failing(engine, pending, missing)
        missing = {agent: wids for agent, wids in missing.items() if wids}
        # force: the markers of lost jobs may still be there (Redis kept them, or the answer was lost)
        sent, _ = self.reconciler.enqueue_sync(missing, force=True) if missing else (0, 0)
        return {"pending": sum(len(w) for w in pending.values()), "enqueued": sent, "failing": len(failing),
                **embed,
                **({"failingWindows": failing[:20]} if failing else {}),
                "ms": round((time.monotonic() - started) * 1000, 2)}

    async def _hold_failing(self, engine: Engine, pending: dict[str, list[int]],
                            missing: dict[str, set[int]]) -> list[str]:
        """Take out of `missing` the windows whose last job was dead-lettered and that have not
        changed since (a new chain of retries would fail the same way); returns them as "agent:wid".

        They stay dirty, counted in the backlog. A change (an append, a rewind) moves the window's
        generation and it is sent again; a worker's startup sweep sends them all (a new version may
        reconcile them). Windows reconciled since are forgotten."""
        noted = failing_windows(self.reconciler.broker)
        if not noted:
            return []
        forget_failing(self.reconciler.broker, [(a, w) for a, w in noted if w not in pending.get(a, ())])
        held = []
        for (agent, wid), gen in sorted(noted.items()):
            if wid in missing.get(agent, ()):
                state = await window_gen(await engine.store(agent), wid)
                if state is not None and state.rebuild_gen == gen:
                    missing[agent].discard(wid)
                    held.append(f"{agent}:{wid}")
        return held
