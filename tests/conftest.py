"""Test set-up: async tests run on a fresh event loop each; engines open on real SQLite files."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from sessionsearch import logging as sslogging


def pytest_configure(config):
    sslogging.configure("WARNING")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**args))
        return True
    return None
