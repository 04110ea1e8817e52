"""Test set-up: async tests run on a fresh event loop each; engines open on real SQLite files."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from sessionsearch import logging as sslogging

from .server import Server


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
