"""Workers started together send each dirty window once; a marker older than a sweep is taken over.

A worker's startup sweep sends every dirty window with no job waiting, even when its marker says
queued (a marker can outlive a worker killed mid-job). Three workers started together after an
import each read an empty queue and each sent every window: three jobs a window, two of them
finding it clean, which cost the workers more than the reconciliation itself
(docs/performance/postgres.md, "Import and reconciliation: jobs and CPU").
A sweep now leaves alone the markers set after it began: another process has just sent that job.
"""

from __future__ import annotations

import asyncio
import threading
import time

from sessionsearch import Engine, Settings
from sessionsearch.protocol import AppendParams
from sessionsearch.queue import Pipeline
from sessionsearch.queue.actors import Markers
from sessionsearch.worker import sweep
from sessionsearch.worker.sweep import Sweeper

from ..helpers import chain

WINDOWS = 12


async def _dirty_windows(settings: Settings) -> None:
    async with Engine(settings=settings) as engine:
        for n in range(WINDOWS):
            await engine.append(AppendParams(sessionKey=f"agent:main:s{n}", events=chain(f"s{n}-", [("user", f"ledger entry {n}")])), index=False)


async def test_workers_starting_together_send_each_dirty_window_once(tmp_path, redis_url, monkeypatch):
    settings = Settings(data_dir=str(tmp_path / "data"), redis_url=redis_url)
    await _dirty_windows(settings)
    pipelines = [Pipeline(settings), Pipeline(settings)]
    first, second = (Sweeper(settings, p.reconciler) for p in pipelines)
    sent_first: list[dict] = []
    real_pending_jobs = sweep.pending_jobs

    def first_sweeps_meanwhile(broker):
        """The second worker reads the queue, empty; the first one's whole sweep runs before it goes on."""
        seen = real_pending_jobs(broker)
        monkeypatch.setattr(sweep, "pending_jobs", real_pending_jobs)

        async def run_first() -> None:
            try:
                sent_first.append(await first.startup())
            finally:
                await first.aclose()

        thread = threading.Thread(target=asyncio.run, args=(run_first(),))
        thread.start()
        thread.join(60)
        return seen

    try:
        monkeypatch.setattr(sweep, "pending_jobs", first_sweeps_meanwhile)
        assert (await second.startup())["enqueued"] == 0  # the first one's markers were set since it began
        assert sent_first[0]["enqueued"] == WINDOWS
        assert pipelines[0].queue_depth()["ready"] == WINDOWS
        # a marker set before a sweep began (a worker killed mid-job left it) is taken over
        third = Sweeper(settings, pipelines[1].reconciler)
        pipelines[0].reconciler.broker.flush_all()  # the jobs were lost, the markers stayed
        markers = pipelines[0].reconciler.markers
        assert markers.client.zcard(markers.zset) == WINDOWS
        try:
            assert (await third.startup())["enqueued"] == WINDOWS
        finally:
            await third.aclose()
    finally:
        await second.aclose()
        for pipeline in pipelines:
            pipeline.close()


def test_markers_set_before_a_time_are_taken_over_and_later_ones_are_not(redis_url):
    import redis

    for client in (redis.Redis.from_url(redis_url), None):  # Redis, and the embedded mode's dict
        markers = Markers(client)
        assert markers.acquire([("main", 1)]) == [("main", 1)]
        # a gap on both sides: Redis keeps a score the script computed to 14 digits (0.1 ms here)
        time.sleep(0.05)
        between = time.time()
        time.sleep(0.05)
        assert markers.acquire([("main", 2)]) == [("main", 2)]
        assert markers.acquire([("main", 1), ("main", 2)]) == []
        assert markers.acquire([("main", 1), ("main", 2)], set_before=between) == [("main", 1)]
        assert markers.acquire([("main", 1), ("main", 2)], set_before=time.time() + 1) == [("main", 1), ("main", 2)]
        assert markers.acquire([("main", 1), ("main", 2)], force=True) == [("main", 1), ("main", 2)]
