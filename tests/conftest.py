"""Test set-up: async tests run on a fresh event loop each; engines open on real SQLite files, or on
a real PostgreSQL database for the tests that take the `backend` fixture (run once per backend).
`make test` runs tests side by side in worker processes (pytest -n): what a test shares with others
is keyed by its process (a PostgreSQL database, a Redis database), never by its module."""

from __future__ import annotations

import asyncio
import inspect

import pytest
import redis

from sessionsearch import logging as sslogging

from .helpers import Where
from .server import Server
from .services import create_pg_database, drop_pg_database, empty_pg_database, require_redis


def pytest_configure(config):
    sslogging.configure("WARNING")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**args))
        return True
    return None


@pytest.fixture
def server(tmp_path):
    """A real `sessionsearch serve` (embedded) on loopback; stopping it cleanly and no crash logged are part of every test."""
    srv = Server(tmp_path / "data", tmp_path / "server.log")
    yield srv
    assert srv.stop() == 0
    log = srv.log_path.read_text()
    assert "api.crashed" not in log and "api.failed" not in log, log[-3000:]


@pytest.fixture
def redis_url():
    """This test process's Redis database (claimed by services.worker_redis_db), emptied before and after."""
    url = require_redis()
    redis.Redis.from_url(url).flushdb()
    yield url
    redis.Redis.from_url(url).flushdb()


@pytest.fixture(scope="session")
def pg_database():
    """A PostgreSQL database of this test session's own, dropped at its end."""
    url = create_pg_database()
    yield url
    drop_pg_database(url)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    """Where a test's engines keep their data: SQLite files under tmp_path, or the session's
    PostgreSQL database emptied for this test. The shared behaviour tests take this."""
    if request.param == "sqlite":
        yield Where("sqlite", tmp_path, None)
        return
    url = request.getfixturevalue("pg_database")
    empty_pg_database(url)
    yield Where("postgres", tmp_path, url)


@pytest.fixture
def pg(request, tmp_path):
    """The session's PostgreSQL database emptied for this test: the PostgreSQL-only tests take this."""
    url = request.getfixturevalue("pg_database")
    empty_pg_database(url)
    return Where("postgres", tmp_path, url)
