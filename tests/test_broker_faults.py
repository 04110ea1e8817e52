"""Faults at the broker and the worker processes: Redis stopped, hung and restarted empty, a wrapper killed.

Each test runs its own redis-server (stopped, SIGSTOPped and restarted here, never the shared one),
a real `sessionsearch serve` in Redis mode and real `sessionsearch worker` processes.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from sessionsearch.queue.broker import NAMESPACE, QUEUE

from .helpers import chain, leaf, msg
from .server import Server
from .services import free_port, redis_server

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results" / "broker_faults.json"
DEADLINE_S = 90
# A request that waited on Redis's 5 s socket timeout takes 5 s or more; one that did not takes
# milliseconds. This bound, far above the second and below the first, only tells them apart.
ANSWERED_S = 2.5


class PrivateRedis:
    """A redis-server of this test's own, on a fixed port it can stop, hang and restart on."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = redis_server(self.port)
        self.hung = False

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def stop(self) -> None:
        if self.proc is not None:
            self.resume()
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def start(self) -> None:
        """A fresh, empty server on the same port (it keeps nothing: no RDB, no AOF)."""
        assert self.proc is None
        self.proc = redis_server(self.port)

    def restart_empty(self) -> None:
        self.stop()
        self.start()

    def hang(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.hung = True

    def resume(self) -> None:
        if self.hung and self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)
        self.hung = False

    def queued(self) -> int:
        """Reconcile jobs waiting, ready or delayed."""
        client = self.client()
        return client.llen(f"{NAMESPACE}:{QUEUE}") + client.llen(f"{NAMESPACE}:{QUEUE}.DQ")


@pytest.fixture
def private_redis():
    server = PrivateRedis()
    try:
        yield server
    finally:
        server.stop()  # SIGCONT first when it was left hung


def timed(call, *args, **kw):
    started = time.monotonic()
    result = call(*args, **kw)
    return time.monotonic() - started, result


def make_backlog(web: Server, tag: str, sessions: int) -> None:
    """`sessions` windows needing reconciliation (each rewinds past `<tag>gone`), and one live session
    whose `<tag>keep` the index has at once."""
    status, _ = web.post("transcript.append", {"sessionKey": f"agent:main:{tag}live",
                                                "events": chain(f"{tag}live", [("user", f"{tag}keep live")])})
    assert status == 200
    for n in range(sessions):
        key = f"agent:main:{tag}{n}"
        status, _ = web.post("transcript.append", {"sessionKey": key, "events": chain(
            f"{tag}{n}m", [("user", f"{tag}keep session {n}"), ("assistant", f"{tag}gone reply {n}")])})
        assert status == 200
        status, body = web.post("transcript.append", {"sessionKey": key, "events": [
            leaf(f"{tag}{n}l", f"{tag}{n}m2", f"{tag}{n}m1"),
            msg(f"{tag}{n}n", "assistant", f"{tag}keep again {n}", f"{tag}{n}l")]})
        assert status == 200 and body["needsReconcile"] is True


def backlog(web: Server) -> int:
    status, body = web.post("index.status", {})
    assert status == 200
    return sum(agent["backlog"] for agent in body["agents"])


def wait_drained(web: Server, worker=None, deadline_s: float = DEADLINE_S) -> float:
    """Seconds until no window needs reconciliation (fails after `deadline_s`)."""
    started = time.monotonic()
    while backlog(web):
        assert time.monotonic() - started < deadline_s, worker.log_path.read_text()[-3000:] if worker else ""
        time.sleep(0.05)
    return time.monotonic() - started


def search(web: Server, word: str) -> tuple[float, int, dict]:
    seconds, (status, body) = timed(web.post, "sessions.search", {"query": word, "limit": 25})
    return seconds, status, body


def test_searches_readyz_metrics_and_appends_answer_at_once_while_redis_is_hung(tmp_path, private_redis):
    web = Server(tmp_path / "data", tmp_path / "web.log", SESSIONSEARCH_REDIS_URL=private_redis.url)
    try:
        make_backlog(web, "hung", 3)
        private_redis.hang()
        for _ in range(5):
            seconds, status, body = search(web, "hungkeep")
            assert status == 200 and body["indexing"] is True, body
            assert [hit["messageId"] for hit in body["results"]] == ["hunglive1"]  # what the index has
            assert seconds < ANSWERED_S, seconds
        seconds, (status, body) = timed(web.get, "/readyz")
        assert status == 503 and body["status"] == "unavailable" and body["reason"].startswith("redis unreachable")
        assert seconds < ANSWERED_S, seconds
        seconds, (status, text) = timed(web.get, "/metrics")
        assert status == 200 and "sessionsearch_queue_up 0.0" in text and "sessionsearch_queue_depth{" not in text
        assert seconds < ANSWERED_S, seconds
        seconds, _ = timed(make_backlog, web, "later", 1)  # appends never touch Redis
        assert seconds < ANSWERED_S, seconds
        private_redis.resume()
        deadline = time.monotonic() + DEADLINE_S
        while private_redis.queued() < 3:  # a search after the hang queues what the hang held back
            assert time.monotonic() < deadline
            _, status, body = search(web, "hungkeep")
            assert status == 200 and body["indexing"] is True
            time.sleep(0.1)
        assert web.get("/readyz")[0] == 200
    finally:
        private_redis.resume()
        assert web.stop() == 0

