"""Real PostgreSQL for the tests: scratch databases on the machine's server (CI starts it), and a
private server a test may stop and start without touching anyone else's."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

from .services import free_port

PG_HOST, PG_PORT = "127.0.0.1", int(os.environ.get("SESSIONSEARCH_TEST_PG_PORT", "5432"))
PG_BIN = Path(os.environ.get("SESSIONSEARCH_TEST_PG_BIN") or max(
    Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), default=Path("/usr/lib/postgresql/15/bin")))


def server_url(port: int = PG_PORT, database: str = "postgres") -> str:
    return f"postgresql://postgres@{PG_HOST}:{port}/{database}"


def require_postgres() -> str:
    """The URL of the machine's server's `postgres` database; fails (never skips) when it is down."""
    url = server_url()
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        pytest.fail(f"PostgreSQL is not reachable at {PG_HOST}:{PG_PORT} ({exc}); `make test` starts it "
                    "(scripts/services), or apt-get install postgresql")
    return url


@contextmanager
def scratch_database(tag: str, port: int | None = None) -> Iterator[str]:
    """A uniquely named database (ss_<tag>_<random>) for one test, dropped after; yields its URL."""
    admin = require_postgres() if port is None else server_url(port)
    name = f"ss_{tag}_{secrets.token_hex(4)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server_url(port or PG_PORT, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class PrivatePostgres:
    """A PostgreSQL server of its own in a temporary directory, on a free loopback port: for tests
    that stop and restart the database. As root it runs as the `postgres` user (initdb refuses root)."""

    def __init__(self) -> None:
        if not (PG_BIN / "initdb").exists():
            pytest.fail(f"{PG_BIN}/initdb is missing: apt-get install postgresql (or set SESSIONSEARCH_TEST_PG_BIN)")
        self.dir = Path(tempfile.mkdtemp(prefix="ss-private-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = server_url(self.port)
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.dir, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8",
                  "--locale=C.UTF-8")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        run = subprocess.run([*self._as, str(PG_BIN / tool), *args], capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            raise AssertionError(f"{tool} failed: {run.stdout[-2000:]}{run.stderr[-2000:]}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses={PG_HOST} -c fsync=off -c max_connections=60"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "server.log"), "-w", "start")

    def stop(self) -> None:
        """A fast shutdown: open connections are cut, as in a restart or failover."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def database(self, name: str) -> str:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return server_url(self.port, name)

    def close(self) -> None:
        if self.running():
            try:
                self.stop()
            except AssertionError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_until(check, *, timeout_s: float = 60, what: str = "condition"):
    """Poll `check()` until it returns something truthy; that value. Fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
