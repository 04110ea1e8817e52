"""Faults at the broker and the worker processes: Redis stopped, hung and restarted empty, a wrapper killed.

Each test runs its own redis-server (stopped, SIGSTOPped and restarted here, never the shared one),
a real `sessionsearch serve` in Redis mode and real `sessionsearch worker` processes.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from sessionsearch import Engine, Settings
from sessionsearch.protocol import AppendParams
from sessionsearch.queue import Pipeline
from sessionsearch.queue.broker import NAMESPACE, QUEUE
from sessionsearch.worker.sweep import Sweeper

from .. import figures
from ..helpers import chain, leaf, msg, wait_until
from ..reconcile.test_pipeline import Worker
from ..server import Server
from ..services import free_port, redis_server

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

    def unfinished(self) -> int:
        """Reconcile jobs Redis holds: waiting, delayed, or taken by a worker and not yet acknowledged."""
        client = self.client()
        return client.hlen(f"{NAMESPACE}:{QUEUE}.msgs") + client.hlen(f"{NAMESPACE}:{QUEUE}.DQ.msgs")

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


def make_backlog(web: Server, tag: str, sessions: int, messages: int = 2) -> float:
    """`sessions` windows needing reconciliation (each of `messages` rewinds past all but its first),
    and one live session whose `<tag>keep` the index has at once. Returns the slowest append's seconds."""
    slowest, (status, _) = timed(web.post, "transcript.append", {
        "sessionKey": f"agent:main:{tag}live", "events": chain(f"{tag}live", [("user", f"{tag}keep live")])})
    assert status == 200
    for n in range(sessions):
        key = f"agent:main:{tag}{n}"
        texts = [("user", f"{tag}keep session {n}")] + [("assistant", f"{tag}gone reply {n} {i}")
                                                         for i in range(messages - 1)]
        took, (status, _) = timed(web.post, "transcript.append",
                                  {"sessionKey": key, "events": chain(f"{tag}{n}m", texts)})
        assert status == 200
        slowest = max(slowest, took)
        took, (status, body) = timed(web.post, "transcript.append", {"sessionKey": key, "events": [
            leaf(f"{tag}{n}l", f"{tag}{n}m{messages}", f"{tag}{n}m1"),
            msg(f"{tag}{n}n", "assistant", f"{tag}keep again {n}", f"{tag}{n}l")]})
        assert status == 200 and body["needsReconcile"] is True
        slowest = max(slowest, took)
    return slowest


def commands(client: redis.Redis) -> int:
    """Commands the server has processed, this INFO call included."""
    return client.info("stats")["total_commands_processed"]


def backlog(web: Server) -> int:
    status, body = web.post("index.status", {})
    assert status == 200
    return sum(agent["backlog"] for agent in body["agents"])


def wait_drained(web: Server, worker: Worker | None = None, deadline_s: float = DEADLINE_S) -> float:
    """Seconds until no window needs reconciliation (fails after `deadline_s`)."""
    started = time.monotonic()
    wait_until(lambda: not backlog(web), deadline_s,
               lambda: f"the backlog to drain: {worker.log_path.read_text()[-3000:] if worker else ''}")
    return time.monotonic() - started


def search(web: Server, word: str) -> tuple[float, int, dict]:
    seconds, (status, body) = timed(web.post, "sessions.search", {"query": word, "limit": 25})
    return seconds, status, body


def test_searches_readyz_metrics_and_appends_answer_at_once_while_redis_is_hung(tmp_path, private_redis):
    web = Server(tmp_path / "data", tmp_path / "web.log", SESSIONSEARCH_REDIS_URL=private_redis.url)
    try:
        admin = private_redis.client()
        before = commands(admin)
        make_backlog(web, "hung", 3)
        assert commands(admin) == before + 1  # this INFO only: appends, rewinds included, never ask Redis
        private_redis.hang()
        for _ in range(5):
            seconds, status, body = search(web, "hungkeep")
            assert status == 200 and body["indexing"] is True, body
            assert [hit["messageId"] for hit in body["results"]] == ["hunglive1"]  # what the index has
            assert seconds < ANSWERED_S, seconds
        web.ready_when(503)
        seconds, (status, body) = timed(web.get, "/readyz")
        assert status == 503 and body["status"] == "unavailable" and body["reason"].startswith("redis unreachable")
        assert seconds < ANSWERED_S, seconds
        seconds, (status, text) = timed(web.get, "/metrics")
        assert status == 200 and "sessionsearch_queue_up 0.0" in text and "sessionsearch_queue_depth{" not in text
        assert seconds < ANSWERED_S, seconds
        seconds, _ = timed(make_backlog, web, "later", 1)
        assert seconds < ANSWERED_S, seconds
        private_redis.resume()

        def queued_again() -> bool:  # a search after the hang queues what the hang held back
            if private_redis.queued() >= 3:
                return True
            _, status, body = search(web, "hungkeep")
            assert status == 200 and body["indexing"] is True
            return False

        wait_until(queued_again, DEADLINE_S, "the windows the hang held back to be queued", every=0.1)
        web.ready_when(200)
    finally:
        private_redis.resume()
        assert web.stop() == 0


def test_a_worker_drains_what_redis_lost_in_an_empty_restart_without_any_search(tmp_path, private_redis):
    web = Server(tmp_path / "data", tmp_path / "web.log", SESSIONSEARCH_REDIS_URL=private_redis.url)
    worker = Worker(tmp_path / "data", private_redis.url, tmp_path / "worker.log",
                    SESSIONSEARCH_RECONCILE_SWEEP_EVERY_S="0.5")
    try:
        worker.job_processes()
        private_redis.stop()
        make_backlog(web, "lost", 5)  # what a search queued here would have been lost with Redis
        private_redis.start()
        wait_drained(web, worker)  # no search: the worker found the backlog on its own
        seconds, status, body = search(web, "lostkeep")
        assert status == 200 and "indexing" not in body and len(body["results"]) == 11
        assert worker.proc.poll() is None  # the wrapper rode out the outage
    finally:
        assert (worker.stop(), web.stop()) == (0, 0)  # both stopped, whichever fails


def test_a_worker_started_while_redis_is_down_waits_for_it_then_reconciles(tmp_path, private_redis):
    web = Server(tmp_path / "data", tmp_path / "web.log", SESSIONSEARCH_REDIS_URL=private_redis.url)
    make_backlog(web, "early", 2)
    private_redis.stop()
    worker = Worker(tmp_path / "data", private_redis.url, tmp_path / "worker.log",
                    SESSIONSEARCH_RECONCILE_SWEEP_EVERY_S="0.5")
    try:

        def sweep_failed() -> dict | None:
            failed = next((e for e in worker.events() if e.get("event") == "worker.sweep_failed"), None)
            assert failed or worker.proc.poll() is None, worker.log_path.read_text()[-3000:]  # no crash loop
            return failed

        failed = wait_until(sweep_failed, DEADLINE_S, lambda: f"a failed sweep: {worker.log_path.read_text()[-3000:]}")
        assert "Connection refused" in failed["error"] or "Error 111" in failed["error"], failed
        private_redis.start()
        wait_drained(web, worker)
        assert worker.proc.poll() is None
    finally:
        assert (worker.stop(), web.stop()) == (0, 0)  # both stopped, whichever fails


def descendants(pid: int) -> dict[int, str]:
    """Every process below `pid`, by pid, with its start time (so that a reused pid is not mistaken)."""
    parents: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
            starts[int(entry.name)] = fields[19]
    out, todo = {}, [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out[child] = starts[child]
            todo.append(child)
    return out


def alive(pid: int, started: str) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == started and fields[0] != "Z"  # a zombie has exited; only its parent's wait is left


def test_the_dramatiq_processes_exit_when_the_worker_wrapper_is_killed(tmp_path, private_redis):
    worker = Worker(tmp_path / "data", private_redis.url, tmp_path / "worker.log", "--processes", "2")
    below: dict[int, str] = {}
    try:
        wait_until(lambda: len(worker.job_processes()) >= 2, DEADLINE_S, "two job processes")
        below = descendants(worker.proc.pid)
        assert set(worker.job_processes()) | {worker.dramatiq_pid()} <= set(below)
        worker.proc.kill()
        worker.proc.wait(10)

        def running() -> list[int]:
            return [pid for pid, started in below.items() if alive(pid, started)]

        wait_until(lambda: not running(), 30, lambda: f"the processes below the killed wrapper to exit: {running()}")
    finally:
        for pid, started in below.items():  # whatever outlived the wrapper when the test failed
            if alive(pid, started):
                os.kill(pid, signal.SIGKILL)
        worker.stop()


def test_a_process_whose_parent_died_before_it_asked_to_die_with_it_exits_at_once():
    script = "import sys; from sessionsearch.worker.lifeline import die_with_parent; " \
             "die_with_parent(int(sys.argv[1])); print('still running')"
    for parent, code, out in ((os.getpid(), 0, "still running\n"), (1, 1, "")):  # pid 1: as if reparented
        run = subprocess.run([sys.executable, "-c", script, str(parent)], capture_output=True, text=True, timeout=60)
        assert (run.returncode, run.stdout) == (code, out), run.stderr


async def test_a_periodic_sweep_sends_what_has_no_job_and_asks_redis_nothing_when_nothing_is_dirty(
        tmp_path, private_redis):
    # no meaning index: its embed backlog would make these windows work for the sweep
    settings = Settings(data_dir=str(tmp_path / "data"), redis_url=private_redis.url, embedder="none")
    pipeline = Pipeline(settings)
    sweeper = Sweeper(settings, pipeline.reconciler)
    try:
        async with Engine(settings=settings) as engine:
            for agent in ("main", "ops", "work_bot"):  # 300 clean windows
                for n in range(100):
                    await engine.append(AppendParams(sessionKey=f"agent:{agent}:s{n}", events=chain(f"s{n}m", [("user", f"clean {n}")])))
            admin = private_redis.client()
            before = commands(admin)
            started = time.perf_counter()
            assert await sweeper.periodic() == {"pending": 0, "enqueued": 0, "embedWindows": 0}  # the first opens the databases
            first_ms = (time.perf_counter() - started) * 1000
            seconds = []
            for _ in range(50):
                started = time.perf_counter()
                assert await sweeper.periodic() == {"pending": 0, "enqueued": 0, "embedWindows": 0}
                seconds.append(time.perf_counter() - started)
            assert commands(admin) == before + 1  # this INFO only: an idle sweep never asks Redis
            idle = {"agents": 3, "windows": 300, "first_sweep_ms": round(first_ms, 3), "sweeps": 50,
                    "p50_ms": round(statistics.median(seconds) * 1000, 3), "max_ms": round(max(seconds) * 1000, 3),
                    "redis_commands": 0}
            print(f"idle periodic sweep: {idle}")
            figures.record("broker_faults", "idle_sweep", idle)

            await engine.append(AppendParams(sessionKey="agent:main:r", events=chain("r", [("user", "kept"), ("user", "rewound")])))
            await engine.append(AppendParams(sessionKey="agent:main:r", events=[leaf("l1", "r2", "r1"), msg("x", "user", "again", "l1")]))
            assert (await sweeper.periodic())["enqueued"] == 1
            assert (await sweeper.periodic())["enqueued"] == 0  # its job waits in the queue
            assert private_redis.queued() == 1
            private_redis.restart_empty()
            assert (await sweeper.periodic())["enqueued"] == 1  # the job was lost with Redis's memory
            assert private_redis.queued() == 1
    finally:
        await sweeper.aclose()
        pipeline.close()


SEARCHES = 20


def enqueues(web: Server, worker: Worker | None = None) -> float:
    """Jobs the web process (and `worker`'s sweeps) have sent to Redis so far."""
    status, text = web.get("/metrics")
    assert status == 200
    if worker is not None:
        text += "\n" + worker.scrape()
    return sum(float(line.split()[1]) for line in text.splitlines()
               if line.startswith("sessionsearch_enqueues_total "))


def search_figures(web: Server, word: str, *, during_fault: bool) -> dict:
    """SEARCHES searches over HTTP: p50 and max in ms; during a fault every answer must say indexing."""
    seconds = []
    for _ in range(SEARCHES):
        took, status, body = search(web, word)
        assert status == 200, body
        assert body["results"], body  # at least the live hit: the index answers
        if during_fault:
            assert body["indexing"] is True, body
            assert took < ANSWERED_S, took
        seconds.append(took)
    return {"p50_ms": round(statistics.median(seconds) * 1000, 2), "max_ms": round(max(seconds) * 1000, 2)}


def probes(web: Server) -> dict:
    """/readyz and /metrics while Redis is out: answered, 503 and queue_up 0, and how fast."""
    web.ready_when(503)
    ready_s, (status, body) = timed(web.get, "/readyz")
    assert status == 503 and body["reason"].startswith("redis unreachable"), body
    metrics_s, (status, text) = timed(web.get, "/metrics")
    assert status == 200 and "sessionsearch_queue_up 0.0" in text
    assert ready_s < ANSWERED_S and metrics_s < ANSWERED_S, (ready_s, metrics_s)
    return {"readyz_ms": round(ready_s * 1000, 2), "metrics_ms": round(metrics_s * 1000, 2)}


def all_found(web: Server, tag: str, sessions: int) -> None:
    """Nothing lost: every survivor of the phase's sessions is found, no rewound text is."""
    _, status, body = search(web, f"{tag}keep")
    assert status == 200 and "indexing" not in body and len(body["results"]) == min(25, 2 * sessions + 1), body
    _, status, body = search(web, f"{tag}gone")
    assert status == 200 and body["results"] == [], body


def test_search_latency_and_drain_time_with_redis_healthy_stopped_hung_and_restarted_empty(tmp_path, private_redis):
    web = Server(tmp_path / "data", tmp_path / "web.log", SESSIONSEARCH_REDIS_URL=private_redis.url)
    worker = Worker(tmp_path / "data", private_redis.url, tmp_path / "worker.log",
                    SESSIONSEARCH_RECONCILE_SWEEP_EVERY_S="1")
    phases: dict[str, dict] = {}
    try:
        worker.job_processes()
        make_backlog(web, "healthy", 10)
        started = time.monotonic()
        phases["healthy"] = search_figures(web, "healthykeep", during_fault=False)
        phases["healthy"]["drain_s"] = round(time.monotonic() - started + wait_drained(web, worker), 2)

        private_redis.stop()
        append_s = make_backlog(web, "stopped", 10)
        phases["stopped"] = {**search_figures(web, "stoppedkeep", during_fault=True), **probes(web),
                              "append_max_ms": round(append_s * 1000, 2)}
        private_redis.start()  # it comes back empty: nothing was persisted
        phases["stopped"]["drain_s"] = round(wait_drained(web, worker), 2)

        private_redis.hang()
        append_s = make_backlog(web, "hung", 10)
        phases["hung"] = {**search_figures(web, "hungkeep", during_fault=True), **probes(web),
                           "append_max_ms": round(append_s * 1000, 2)}
        private_redis.resume()
        phases["hung"]["drain_s"] = round(wait_drained(web, worker), 2)

        # jobs queued and not yet taken when Redis restarts empty: with Redis just back from a stop,
        # the worker's consumers are still in Dramatiq's 3 s reconnect delay when the search queues them
        private_redis.stop()
        make_backlog(web, "restarted", 30, messages=300)
        sent = enqueues(web, worker)  # while Redis is away nobody can send, so the count holds still
        private_redis.start()
        _, status, body = search(web, "restartedkeep")
        assert status == 200 and body["indexing"] is True

        # the search's windows are handed to Redis after it answers; a round that met a connection
        # the restart broke is dropped, and the next search sends its windows again, as a gateway's would.
        # The worker's sweep (every second here) may hand them first, and the web's then finds them queued
        def all_sent() -> bool:
            if enqueues(web, worker) >= sent + 30:
                return True
            assert search(web, "restartedkeep")[1] == 200
            return False

        wait_until(all_sent, DEADLINE_S, "the 30 windows to be sent again", every=0.2)
        lost = private_redis.unfinished()
        private_redis.restart_empty()
        started = time.monotonic()
        phases["restarted_empty"] = {**search_figures(web, "restartedkeep", during_fault=False), "jobs_lost": lost}
        phases["restarted_empty"]["drain_s"] = round(time.monotonic() - started + wait_drained(web, worker), 2)
        assert lost > 0

        for tag, sessions in (("healthy", 10), ("stopped", 10), ("hung", 10), ("restarted", 30)):
            all_found(web, tag, sessions)
        status, body = web.post("index.status", {})
        assert [a["completeness"] for a in body["agents"]] == [1.0]
        assert worker.proc.poll() is None
    finally:
        private_redis.resume()
        assert (worker.stop(), web.stop()) == (0, 0)  # both stopped, whichever fails
    for phase, values in phases.items():
        print(f"{phase}: {values}")
    figures.record("broker_faults", "phases", {"searches_per_phase": SEARCHES, "sweep_every_s": 1, **phases})
