"""The embedded shape's embed sweeps: rows waiting for an embedding are sent to the in-process
worker without waiting for a meaning search to meet them, as `sessionsearch worker`'s sweeps send
them over Redis (worker/sweep.py).

Two periods. Every WRITTEN_EVERY_S, the agents this process appended to since the last look: a
live append's rows are embedded within seconds, at the cost of one read of each written agent.
Every `reconcile_sweep_every_s`, every agent: rows a reconciliation published (an import, a
rewind) and rows another process wrote. Markers deduplicate the jobs (queue/actors.py), so a window
whose job is queued or running is not sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from ..engine import Engine

log = structlog.get_logger("sessionsearch.worker")

WRITTEN_EVERY_S = 2.0


class EmbedSweeps:
    """Periodic embed sweeps on the serving event loop, with the serving engine."""

    def __init__(self, engine: Engine, *, every_s: float, first_now: bool = True,
                 written_every_s: float = WRITTEN_EVERY_S) -> None:
        """`every_s`: seconds between sweeps of every agent (0: only the written ones after the first);
        `first_now`: sweep every agent at once (the demo waits, to show a search meeting the backlog)."""
        self.engine = engine
        self.every_s = every_s
        self.written_every_s = written_every_s
        self._next_full = time.monotonic() if first_now else time.monotonic() + (every_s or float("inf"))
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sessionsearch-embed-sweeps")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def sweep_once(self) -> int:
        """One sweep: every agent when its period is due, else the written ones; windows sent."""
        if time.monotonic() >= self._next_full:
            self.engine.take_written()
            backlog = await self.engine.embed_backlog()
            self._next_full = time.monotonic() + self.every_s if self.every_s > 0 else float("inf")
        else:
            backlog = {}
            for agent in sorted(self.engine.take_written()):
                backlog.update(await self.engine.embed_backlog(agent))
        backlog = {agent: wids for agent, wids in backlog.items() if wids}
        if backlog and await self.engine.enqueue_embed(backlog):
            return sum(len(w) for w in backlog.values())
        return 0

    async def _run(self) -> None:
        while True:
            try:
                sent = await self.sweep_once()
                if sent:
                    log.info("worker.embed_sweep", windows=sent)
            except Exception as exc:  # a store that failed to open, say: the next period tries again
                log.warning("worker.embed_sweep_failed", error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(self.written_every_s)
