"""Real services for the tests: Redis must be there (CI starts it); a test never skips without it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
import redis

# a private Redis for one checkout's run (SESSIONSEARCH_TEST_REDIS_PORT), else the machine's
REDIS_HOST, REDIS_PORT = "127.0.0.1", int(os.environ.get("SESSIONSEARCH_TEST_REDIS_PORT", "6379"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_redis(db: int = 13) -> str:
    url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"
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
    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.2).ping()
            return proc
        except redis.RedisError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"redis-server did not start on port {port}")
            time.sleep(0.05)


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
