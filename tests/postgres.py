"""Real PostgreSQL for the tests: a scratch database on the machine's server (CI starts it), and a
private server that a test may stop and start without touching anyone else's."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from .services import create_pg_database, drop_pg_database, free_port

PG_HOST = "127.0.0.1"
PG_BIN = Path(os.environ.get("SESSIONSEARCH_TEST_PG_BIN") or max(
    Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), default=Path("/usr/lib/postgresql/15/bin")))


def server_url(port: int, database: str = "postgres") -> str:
    return f"postgresql://postgres@{PG_HOST}:{port}/{database}"


@contextmanager
def scratch_database(tag: str) -> Iterator[str]:
    """A uniquely named database on the machine's server for one test, dropped after; its URL."""
    url = create_pg_database(f"ss_{tag}")
    try:
        yield url
    finally:
        drop_pg_database(url)


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
