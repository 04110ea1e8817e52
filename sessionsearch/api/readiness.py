"""What `/readyz` answers: the outcome of a readiness check that runs in the background, never behind searches.

A probe that ran the check itself waited for what the searches hold (the PostgreSQL pool, each
agent's readers, the default thread pool a Redis ping shared), seconds under load: long enough for a
load balancer to take a healthy process out of rotation. The check now runs every EVERY_S in a
task of its own and the probe answers its latest outcome at once; an outcome older than STALE_S
(a check stuck on a store or on Redis) is itself an answer: not ready. Reading every agent's SQLite
database costs about 0.1 ms of CPU each, so that part runs every STORES_EVERY_S (1,000 agents: about
1% of a core): a store that stops answering shows within that.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import structlog

from ..errors import SessionSearchError

if TYPE_CHECKING:
    from ..engine import Engine
    from ..queue import Pipeline

log = structlog.get_logger("sessionsearch.api")

EVERY_S = 1.0  # how often the check runs: how soon /readyz tells a change
STALE_S = 5.0  # an outcome older than this is not answered: the check is stuck, so the process is not ready
STORES_EVERY_S = 10.0  # how often the check reads every agent's database too (one database: each time)

Outcome = tuple[int, dict[str, Any]]  # the status code and the body /readyz answers


class Readiness:
    """The engine's and the queue's readiness, checked every EVERY_S while the app runs."""

    def __init__(self, engine: Engine, pipeline: Pipeline) -> None:
        self.engine = engine
        self.pipeline = pipeline
        # a Redis ping of its own: in the default pool it queued behind whatever else runs there
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sessionsearch-readyz")
        self._outcome: Outcome = (503, {"status": "unavailable", "reason": "starting"})
        self._checked_at = time.monotonic()
        self._stores_at = -STORES_EVERY_S  # when every store was last read (time.monotonic)
        self._task: asyncio.Task[None] | None = None

    async def check(self, *, every_store: bool | None = None) -> Outcome:
        """Run the checks once: the store takes writes, every agent's store answers (read every
        STORES_EVERY_S, or as `every_store` says), and Redis answers (when used)."""
        if every_store is None:
            every_store = time.monotonic() - self._stores_at >= STORES_EVERY_S
        try:
            await self.engine.check_ready(every_store=every_store)
        except SessionSearchError as exc:
            return 503, {"status": "unavailable", "reason": exc.message}
        except Exception as exc:  # a check that failed in an unforeseen way is not ready, and is logged
            log.warning("api.ready_check_failed", exc_info=True)
            return 503, {"status": "unavailable", "reason": f"readiness check failed: {exc}"}
        if every_store:  # after a failure every check reads them all again, until they answer
            self._stores_at = time.monotonic()
        if not self.pipeline.embedded:
            try:  # waits up to the request timeout on a hung Redis
                await asyncio.get_running_loop().run_in_executor(self._executor, self.pipeline.ping)
            except Exception as exc:  # any connection failure or timeout means not ready
                return 503, {"status": "unavailable", "reason": f"redis unreachable: {exc}"}
        return 200, {"status": "ready", "mode": "embedded" if self.pipeline.embedded else "redis"}

    async def refresh(self, *, every_store: bool | None = None) -> None:
        self._outcome = await self.check(every_store=every_store)
        self._checked_at = time.monotonic()

    async def start(self) -> None:
        """Check once (the first probe then has an answer), then keep checking in the background.
        The first check leaves every agent's store to the background's first one: with 1,000
        agents under a tight file budget, reading them all held start-up for tens of seconds."""
        await self.refresh(every_store=False)
        self._task = asyncio.create_task(self._run(), name="sessionsearch-readiness")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(EVERY_S)
            await self.refresh()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=False)

    def answer(self) -> Outcome:
        """The latest outcome, or not ready when no check has finished for STALE_S."""
        age = time.monotonic() - self._checked_at
        if age > STALE_S:
            reason = f"the readiness check has not finished for {age:.0f} s: a store or Redis is not answering"
            return 503, {"status": "unavailable", "reason": reason}
        return self._outcome
