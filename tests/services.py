"""Real services for the tests: Redis must be there (CI starts it); a test never skips without it."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
import redis

from .helpers import wait_until

# a private Redis for one checkout's run (SESSIONSEARCH_TEST_REDIS_PORT), else the machine's
REDIS_HOST, REDIS_PORT = "127.0.0.1", int(os.environ.get("SESSIONSEARCH_TEST_REDIS_PORT", "6379"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The Redis databases a test process may claim: not 0 (a developer's own), nor the benches' 9, 10 and 14
TEST_REDIS_DBS = (1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 15)
# One lock file per server and database, shared by every checkout on this machine
REDIS_LOCK_DIR = Path(tempfile.gettempdir()) / "sessionsearch-test-redis"


@dataclass
class RedisClaim:
    """A Redis database this process holds for its life: the flock on `lock` is the claim."""

    db: int
    lock: IO[str]

    def release(self) -> None:
        self.lock.close()  # closing the file drops the flock


def claim_redis_db(host: str = REDIS_HOST, port: int = REDIS_PORT, *, dbs: tuple[int, ...] = TEST_REDIS_DBS,
                   folder: Path = REDIS_LOCK_DIR) -> RedisClaim:
    """The first of `dbs` on that server no other live process holds, claimed by an exclusive flock.

    A flock rather than a key in Redis: the kernel drops it the moment its holder exits, however
    it exits (a killed suite leaves no claim to expire), no thread must keep refreshing it, and a
    paused process (a debugger, SIGSTOP) keeps it, where a key's TTL would lapse and hand its
    database to another suite. It binds the processes of one machine, which is where two
    checkouts share a Redis. Raises RuntimeError when every database is held.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for db in dbs:
        lock = open(folder / f"{host}-{port}-{db}.lock", "a+")  # noqa: SIM115 - held open for the claim's life
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        lock.truncate(0)
        lock.write(f"{os.getpid()} {socket.gethostname()}\n")  # who holds it, for a reader wondering
        lock.flush()
        return RedisClaim(db, lock)
    raise RuntimeError(f"every test Redis database on {host}:{port} ({', '.join(map(str, dbs))}) is held by "
                       f"another live test process (lock files in {folder}): run fewer test workers or "
                       "suites at once, or give this run its own redis-server (SESSIONSEARCH_TEST_REDIS_PORT)")


_claim: RedisClaim | None = None


def worker_redis_db() -> int:
    """This test process's own Redis database, claimed on first use and held until it exits
    (claim_redis_db): a `pytest -n` worker runs one test at a time, so its tests may empty it."""
    global _claim
    if _claim is None:
        try:
            _claim = claim_redis_db()
        except RuntimeError as exc:
            pytest.fail(str(exc))
    return _claim.db


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
