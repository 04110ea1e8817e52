"""Real services for the tests: Redis must be there (CI starts it); a test never skips without it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess

import pytest
import redis

from .helpers import wait_until

# a private Redis for one checkout's run (SESSIONSEARCH_TEST_REDIS_PORT), else the machine's
REDIS_HOST, REDIS_PORT = "127.0.0.1", int(os.environ.get("SESSIONSEARCH_TEST_REDIS_PORT", "6379"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_redis_db() -> int:
    """This test process's own Redis database: a `pytest -n` worker (Makefile) runs one test at a
    time, so its tests may empty it; 1-12 for workers gw0-gw11, 13 without workers (benches use 14)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return 13
    n = int(worker.removeprefix("gw"))
    if n >= 12:
        pytest.fail("at most 12 test workers: each needs a Redis database of its own (make test TEST_WORKERS=…)")
    return 1 + n


def require_redis() -> str:
    """This test process's Redis database (worker_redis_db); the test fails, never skips, without Redis."""
    url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{worker_redis_db()}"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {REDIS_HOST}:{REDIS_PORT} ({exc}); `make test` starts it "
                    "(scripts/services), or install redis-server")
    return url


def redis_server(port: int) -> subprocess.Popen:
    """A private redis-server on `port`, for tests that stop and restart it."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server)")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def answering() -> bool:
        try:
            return bool(redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.2).ping())
        except redis.RedisError:
            return False

    try:
        wait_until(answering, 10, f"redis-server to start on port {port}")
    except AssertionError:
        proc.kill()
        raise
    return proc


def terminate(proc: subprocess.Popen, log, *, on_timeout=None) -> int:
    """SIGTERM, wait up to 30 s (then `on_timeout`, or SIGKILL), close the log; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            (on_timeout or proc.kill)()
            proc.wait(30)
    log.close()
    return proc.returncode


# PostgreSQL: the machine's server (CI starts it); each test session makes its own database
PG_ADMIN_URL = os.environ.get("SESSIONSEARCH_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def pg_url(name: str) -> str:
    base, _, _db = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


def require_postgres():
    """A connection to the server's admin database; the test fails (never skips) without one."""
    import psycopg
    try:
        return psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_URL} ({exc}); `make test` needs it running "
                    "(apt-get install postgresql), or set SESSIONSEARCH_TEST_PG_URL")


def create_pg_database(prefix: str = "ss_test") -> str:
    """A fresh, uniquely named database; returns its URL."""
    import uuid
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with require_postgres() as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg_url(name)


def drop_pg_database(url: str) -> None:
    name = url.rpartition("/")[2]
    with require_postgres() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def empty_pg_database(url: str) -> None:
    """Remove every agent's rows (a test's fresh start), ids from 1 again: every table of the
    schema but its migrations' record, read from the catalog (a list kept by hand missed the score
    bounds' tables of migration 13, and a test found the bounds a test before it had folded)."""
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [name for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'ss\\_%' "
            "AND tablename <> 'ss_schema_migrations'")]
        if tables:
            conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY")
