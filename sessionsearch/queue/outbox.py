"""The web process's outbox: windows searches asked to reconcile, handed to Redis by one thread.

A search must answer at once whatever Redis does (SPEC §4), so it never talks to Redis itself: it
puts its windows here and waits at most `wait_s` for the outcome. A healthy Redis answers in a
millisecond or two, so the jobs are queued (or the failure counted) before the search answers. A
Redis that does not answer in time (hung, overloaded, a network partition) costs that one search
`wait_s`; the searches after it do not wait at all until a round gets through again. One thread
means one call at a time against a hung server, however many searches arrive, and the windows that
arrive meanwhile go together in the next round.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger("sessionsearch.queue")

Deliver = Callable[[dict[str, set[int]], int], bool]  # (windows by agent, searches waiting) -> delivered


def _resolve(future: asyncio.Future[bool], delivered: bool) -> None:
    if not future.done():
        future.set_result(delivered)


class Outbox:
    """Windows to queue, merged, and one thread that runs `deliver` on them round after round."""

    def __init__(self, deliver: Deliver, *, wait_s: float) -> None:
        self.deliver = deliver
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._pending: dict[str, set[int]] = {}
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[bool]]] = []
        self._busy = False
        self._stalled = False  # the last round outlasted a search's wait and has not got through since
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def stalled(self) -> bool:
        return self._stalled

    async def put(self, dirty: dict[str, set[int]], *, wait: bool = True) -> bool:
        """Hand the windows over; with `wait`, wait up to `wait_s` for them to be queued.

        True when they were queued, or handed over without waiting while Redis answers; False when
        the round failed, or did not end in time, or Redis has been stalling (then nobody waits).
        """
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        with self._cond:
            for agent, wids in dirty.items():
                self._pending.setdefault(agent, set()).update(wids)
            self._waiters.append((loop, done))
            stalled = self._stalled
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(target=self._run, name="sessionsearch-outbox", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        if stalled or not wait:
            return not stalled
        try:
            return await asyncio.wait_for(asyncio.shield(done), self.wait_s)
        except TimeoutError:
            with self._cond:
                if self._busy:
                    self._stalled = True
            return False

    def join(self, timeout: float = 30.0) -> bool:
        """Wait until every window handed over has had its round; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self, timeout: float = 30.0) -> None:
        self.join(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed)
                if not self._pending:
                    return
                batch, self._pending = self._pending, {}
                waiters, self._waiters = self._waiters, []
                self._busy = True
            started = time.monotonic()
            try:
                delivered = self.deliver(batch, len(waiters))
            except Exception:  # a bug, not Redis: logged; the windows come back with the next search
                log.exception("queue.outbox_failed", windows=sum(len(w) for w in batch.values()))
                delivered = False
            with self._cond:
                self._busy = False
                if delivered:
                    self._stalled = False
                elif time.monotonic() - started >= self.wait_s:  # timed out, not refused: Redis is stalling
                    self._stalled = True
                self._cond.notify_all()
            for loop, future in waiters:
                try:
                    loop.call_soon_threadsafe(_resolve, future, delivered)
                except RuntimeError:  # that search's event loop has closed meanwhile
                    pass
