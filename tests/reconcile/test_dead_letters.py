"""A window whose reconcile job always fails: dead-lettered once, not sent again by every sweep.

Dramatiq dead-letters a job after its retries (the `.XQ` queue). The worker's periodic sweep sends
again the dirty windows that no unfinished job will reach; a dead-lettered window is one of them,
so before, every sweep (30 s) started a new chain of retries for a window that can never reconcile.
"""

from __future__ import annotations

import asyncio

from sessionsearch import Engine, Settings
from sessionsearch import metrics as ssmetrics
from sessionsearch.protocol import AppendParams
from sessionsearch.queue import Pipeline, actors
from sessionsearch.queue.broker import NAMESPACE, QUEUE
from sessionsearch.worker.sweep import Sweeper

from ..faults.test_broker_faults import private_redis  # noqa: F401 (a fixture)
from ..helpers import chain, msg, until

DEADLINE_S = 90  # only tells "done" from "stuck": the chain of two attempts ends within seconds


async def _until(condition, what: str) -> None:
    await until(condition, DEADLINE_S, what)


async def test_a_window_whose_job_was_dead_lettered_is_not_resent_by_the_sweep_until_it_changes(
        tmp_path, private_redis, monkeypatch):  # noqa: F811
    monkeypatch.setattr(actors, "MAX_RETRIES", 1)  # one retry after ~1 s, not eight over minutes
    attempts: dict[tuple[str, int], int] = {}
    broken: set[tuple[str, int]] = set()
    real_reconcile = Engine.reconcile

    async def reconcile(self, agent_id, wid, **kwargs):
        attempts[agent_id, wid] = attempts.get((agent_id, wid), 0) + 1
        if (agent_id, wid) in broken:
            raise RuntimeError("this window cannot be reconciled")
        return await real_reconcile(self, agent_id, wid, **kwargs)

    monkeypatch.setattr(Engine, "reconcile", reconcile)
    settings = Settings(data_dir=str(tmp_path / "data"), redis_url=private_redis.url)
    pipeline = Pipeline(settings)
    sweeper = Sweeper(settings, pipeline.reconciler)
    dead = ssmetrics.get().reconcile_dead_lettered
    dead_before = dead._value.get()
    admin = private_redis.client()
    try:
        async with Engine(settings=settings) as engine:
            await engine.append(AppendParams(sessionKey="agent:main:bad", events=chain("b", [("user", "never indexed")])), index=False)
            # another agent: a job goes on with the windows waiting beside its own in the same database
            await engine.append(AppendParams(sessionKey="agent:ops:good", events=chain("g", [("user", "indexed")])), index=False)
            bad, good = ("main", *(await engine.pending("main"))["main"]), ("ops", *(await engine.pending("ops"))["ops"])
            broken.add(bad)
            assert (await sweeper.periodic())["enqueued"] == 2
            pipeline.start_embedded_worker()  # a Dramatiq worker on the Redis broker, in this process

            async def dead_lettered() -> bool:
                return (admin.zcard(f"{NAMESPACE}:{QUEUE}.XQ") == 1 and dead._value.get() == dead_before + 1
                        and await engine.pending() == {"main": [bad[1]], "ops": []})

            await _until(dead_lettered, "the bad window's job was not dead-lettered")
            assert attempts == {bad: 2, good: 1}
            sweeps = [await sweeper.periodic() for _ in range(5)]
            print("sweeps after the dead letter:", sweeps)
            assert [s["enqueued"] for s in sweeps] == [0] * 5
            assert [s["pending"] for s in sweeps] == [1] * 5 and [s["failing"] for s in sweeps] == [1] * 5
            assert sweeps[0]["failingWindows"] == [f"main:{bad[1]}"]
            await asyncio.sleep(1.5)  # a chain a sweep had started would have run its first attempt by now
            assert attempts == {bad: 2, good: 1} and private_redis.queued() == 0
            assert (await engine.index_status())["agents"][0]["backlog"] == 1  # still counted

            # The window changes: a sweep sends it again; fixed meanwhile, it reconciles.
            await engine.append(AppendParams(sessionKey="agent:main:bad", events=[msg("b2", "user", "changed", "b1")]), index=False)
            broken.clear()
            assert (await sweeper.periodic())["enqueued"] == 1

            async def drained() -> bool:
                return await engine.pending() == {"main": [], "ops": []}

            await _until(drained, "the changed window was not reconciled")
            assert attempts == {bad: 3, good: 1}
            last = await sweeper.periodic()  # (it may also send the embed jobs of the rows indexed now)
            assert (last["pending"], last["enqueued"]) == (0, 0)
    finally:
        await sweeper.aclose()
        pipeline.close()


async def test_a_workers_startup_sweep_sends_a_dead_lettered_window_again(
        tmp_path, private_redis, monkeypatch):  # noqa: F811
    monkeypatch.setattr(actors, "MAX_RETRIES", 0)
    fail = True
    real_reconcile = Engine.reconcile

    async def reconcile(self, agent_id, wid, **kwargs):
        if fail:
            raise RuntimeError("this window cannot be reconciled yet")
        return await real_reconcile(self, agent_id, wid, **kwargs)

    monkeypatch.setattr(Engine, "reconcile", reconcile)
    settings = Settings(data_dir=str(tmp_path / "data"), redis_url=private_redis.url)
    pipeline = Pipeline(settings)
    sweeper = Sweeper(settings, pipeline.reconciler)
    try:
        async with Engine(settings=settings) as engine:
            await engine.append(AppendParams(sessionKey="agent:main:bad", events=chain("b", [("user", "not yet")])), index=False)
            assert (await sweeper.periodic())["enqueued"] == 1
            pipeline.start_embedded_worker()

            async def parked() -> bool:
                return (await sweeper.periodic()).get("failing") == 1

            await _until(parked, "the window's job was not dead-lettered")
            fail = False  # the new version of the worker can reconcile it
            assert (await sweeper.startup())["enqueued"] == 1

            async def drained() -> bool:
                return (await engine.pending())["main"] == []

            await _until(drained, "the window was not reconciled after the worker's restart")
    finally:
        await sweeper.aclose()
        pipeline.close()
