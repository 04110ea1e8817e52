"""`optimize` on a schedule: the common words' postings rebuilt beside the work of a process.

A word's postings answer its one-word searches while fewer than FRESH_LIMIT rows were indexed
after their build (store/sqlite/hot.py); rebuilding them every so often keeps them in use, and
picks up words that became common. `sessionsearch worker` runs this on a thread of its own, at the
workers' CPU priority; `serve` in the embedded mode runs it too, at normal priority (a thread at
idle priority holding the interpreter lock would stall the web process's event loop).
"""

from __future__ import annotations

import asyncio
import threading

import structlog

from ..settings import Settings
from .priority import apply_cpu_priority

log = structlog.get_logger("sessionsearch.optimize")

FIRST_AFTER_S = 60.0  # after a start, let the first reconciliation and searches go first


class PeriodicOptimize:
    def __init__(self, settings: Settings, *, cpu_priority: str = "normal") -> None:
        self.settings = settings
        self.every_s = settings.optimize_every_s
        self.cpu_priority = cpu_priority
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.every_s > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sessionsearch-optimize", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None

    def _run(self) -> None:
        apply_cpu_priority(self.cpu_priority)  # this thread only
        wait = min(FIRST_AFTER_S, self.every_s)
        while not self._stop.wait(wait):
            try:
                asyncio.run(self.once())
            except Exception:  # logged; the next round tries again
                log.exception("optimize.failed")
            wait = self.every_s

    async def once(self) -> dict:
        from ..engine import Engine

        async with Engine(settings=self.settings) as engine:
            result = await engine.optimize()
        for agent, done in result["agents"].items():
            log.info("optimize.done", agent=agent, words=len(done["words"]), dropped=len(done["dropped"]),
                     rows=sum(w["rows"] for w in done["words"].values()),
                     seconds=round(sum(w["seconds"] for w in done["words"].values()), 2))
        return result
