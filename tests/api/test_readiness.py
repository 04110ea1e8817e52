"""/readyz answers the latest background check (api/readiness.py): never behind the searches, and
still telling a process that is not ready."""

from __future__ import annotations

import asyncio

from sessionsearch.api import readiness as readiness_module
from sessionsearch.api.app import create_app
from sessionsearch.settings import Settings
from sessionsearch.store.postgres.backend import POOL_SIZE

from ..helpers import chain
from .test_http import _asgi

KEY = "agent:main:ready"


async def test_readyz_checks_ready_while_every_pooled_connection_is_lent_to_searches(pg):
    app = create_app(Settings(data_dir=str(pg.data_dir), database_url=pg.database_url), sweep=False)
    async with app.router.lifespan_context(app):
        status, body = await _asgi(app, "POST", "/v1/transcript.append",
                                   {"sessionKey": KEY, "events": chain("m", [("user", "ready or not")])})
        assert status == 200, body
        pool = app.state.engine.backend.db.pool
        held = [await pool.getconn() for _ in range(POOL_SIZE)]  # what a burst of searches holds
        try:
            status, body = await _asgi(app, "POST", "/v1/sessions.search", {"query": "ready"})
            assert status == 503, body  # a search does wait for the pool (and gives up)
            await app.state.readiness.refresh()  # a check made now, with the pool all lent
            assert await _asgi(app, "GET", "/readyz") == (200, {"status": "ready", "mode": "embedded"})
        finally:
            for conn in held:
                await pool.putconn(conn)


async def test_readyz_answers_the_last_outcome_while_a_check_is_stuck_and_not_ready_once_it_is_stale(tmp_path):
    app = create_app(Settings(data_dir=str(tmp_path)), sweep=False)
    async with app.router.lifespan_context(app):
        readiness = app.state.readiness
        release = asyncio.Event()

        async def stuck(**_: bool) -> None:  # a store that does not answer
            await release.wait()

        app.state.engine.check_ready = stuck
        checking = asyncio.create_task(readiness.refresh())
        await asyncio.sleep(0)  # the check has started and waits
        assert not checking.done()
        assert await _asgi(app, "GET", "/readyz") == (200, {"status": "ready", "mode": "embedded"})
        readiness._checked_at -= readiness_module.STALE_S + 1  # as if it had waited that long
        status, body = await _asgi(app, "GET", "/readyz")
        assert status == 503 and body["status"] == "unavailable", body
        assert body["reason"].startswith("the readiness check has not finished for "), body
        release.set()
        await checking
        assert await _asgi(app, "GET", "/readyz") == (200, {"status": "ready", "mode": "embedded"})


async def test_readyz_tells_a_failed_check_with_its_reason(tmp_path):
    app = create_app(Settings(data_dir=str(tmp_path)), sweep=False)
    async with app.router.lifespan_context(app):
        from sessionsearch.errors import Unavailable

        async def full(**_: bool) -> None:
            raise Unavailable("database or disk is full: the data dir has 0 bytes free")

        app.state.engine.check_ready = full
        await app.state.readiness.refresh()
        assert await _asgi(app, "GET", "/readyz") == (503, {
            "status": "unavailable", "reason": "database or disk is full: the data dir has 0 bytes free"})


async def test_every_agents_store_is_read_every_few_seconds_and_after_a_failure_at_each_check(tmp_path):
    app = create_app(Settings(data_dir=str(tmp_path)), sweep=False)
    async with app.router.lifespan_context(app):
        readiness = app.state.readiness
        asked: list[bool] = []
        broken = False

        async def recorded(*, every_store: bool = True) -> None:
            asked.append(every_store)
            if broken and every_store:
                from sessionsearch.errors import Unavailable
                raise Unavailable("agent main database is not answering: disk I/O error")

        await readiness.stop()  # no background check between the steps below
        app.state.engine.check_ready = recorded
        await readiness.refresh()
        await readiness.refresh()
        assert asked == [True, False]  # the start-up check left them to the first one after it
        readiness._stores_at -= readiness_module.STORES_EVERY_S  # as if that long had passed
        broken = True
        await readiness.refresh()
        assert (await _asgi(app, "GET", "/readyz"))[0] == 503
        await readiness.refresh()  # read again at once, not in STORES_EVERY_S
        broken = False
        await readiness.refresh()
        await readiness.refresh()
        assert asked == [True, False, True, True, True, False]
        assert (await _asgi(app, "GET", "/readyz"))[0] == 200
