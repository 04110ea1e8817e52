"""Background reconciliation end to end: real Redis, real `sessionsearch worker` processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import dramatiq
import pytest

from sessionsearch import Engine, Settings
from sessionsearch import metrics as ssmetrics
from sessionsearch.importer import run_import
from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.queue import Pipeline
from sessionsearch.text.unicode61 import tokens

from ..helpers import Where, chain, ids, leaf, msg, until, wait_until
from ..services import free_port, redis_server, terminate

DEMO = Path(__file__).resolve().parents[2] / "sessionsearch" / "demo_data"
DEADLINE_S = 90


class Worker:
    """A `sessionsearch worker` process with its own metrics port and log file."""

    def __init__(self, data_dir: Path, redis_url: str, log_path: Path, *args: str, **env: str) -> None:
        self.port = free_port()
        self.log_path = log_path
        environment = {**os.environ, "SESSIONSEARCH_DATA_DIR": str(data_dir), "SESSIONSEARCH_REDIS_URL": redis_url,
                       "SESSIONSEARCH_LOG_LEVEL": "INFO", **env}
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sessionsearch.cli", "worker", "--processes", "1", "--threads", "2",
             "--metrics-port", str(self.port), "--metrics-dir", str(log_path.with_suffix(".metrics")), *args],
            env=environment, stdout=self.log, stderr=subprocess.STDOUT)

    def events(self) -> list[dict]:
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def dramatiq_pid(self) -> int:
        return wait_until(lambda: next((e["pid"] for e in self.events() if e.get("event") == "worker.started"), None),
                          DEADLINE_S, lambda: f"the worker to start: {self.log_path.read_text()[-2000:]}")

    def job_processes(self) -> list[int]:
        """The pids of the processes that run jobs, once each has set its CPU priority."""
        return wait_until(lambda: [e["pid"] for e in self.events() if e.get("event") == "worker.cpu_priority"],
                          DEADLINE_S, lambda: f"a worker process to start: {self.log_path.read_text()[-2000:]}")

    def scrape(self) -> str:
        def metrics() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
                    return resp.read().decode()
            except OSError:
                return None

        return wait_until(metrics, DEADLINE_S, f"the worker's /metrics on port {self.port}", every=0.1)

    def kill(self) -> None:
        try:
            os.killpg(self.dramatiq_pid(), signal.SIGKILL)  # the Dramatiq master and its workers, mid-job
        except ProcessLookupError:  # they had exited already (a stop that timed out afterwards)
            pass
        self.proc.kill()
        self.proc.wait(10)
        self.log.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.dramatiq_pid()  # an operator stops a started worker; before that SIGTERM just kills
        return terminate(self.proc, self.log, on_timeout=self.kill)


def sample(text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if key == want or (labels and key.startswith(name + "{") and all(f'{k}="{v}"' in key for k, v in labels.items())):
            return float(value)
    return None


async def wait_for_backlog_zero(engine: Engine, deadline_s: float = DEADLINE_S) -> None:
    last: dict = {}

    async def drained() -> bool:
        last["status"] = await engine.index_status()
        return all(a["backlog"] == 0 for a in last["status"]["agents"])

    await until(drained, deadline_s, lambda: f"the backlog to drain: {last['status']}", every=0.1)


def _one(where: Path | Where, sqlite_sql: str, pg_sql: str) -> tuple:
    """One row of a read on the store's tables: the agent's SQLite file, or PostgreSQL."""
    if isinstance(where, Where) and where.database_url:
        import psycopg
        with psycopg.connect(where.database_url) as conn:
            return conn.execute(pg_sql).fetchone()
    with sqlite3.connect(where.data_dir / "data" / "agents" / "main.db" if isinstance(where, Where) else where) as conn:
        return conn.execute(sqlite_sql).fetchone()


async def wait_until_mid_job(db: Path | Where, worker: Worker) -> None:
    """Until the worker holds the window's claim and has written some of its index rows."""
    def mid_job() -> bool:
        claimed, written = _one(db, "SELECT (SELECT claim_token FROM windows), (SELECT count(*) FROM msg_fts)",
                                "SELECT (SELECT claim_token FROM ss_windows), (SELECT count(*) FROM ss_index)")
        return bool(claimed and written > 0)

    await until(mid_job, DEADLINE_S, lambda: f"the worker mid-job: {worker.log_path.read_text()[-2000:]}", every=0.02)


async def finish_with_another_worker(engine: Engine, tmp_path: Path, redis_url: str, env: dict) -> None:
    second = Worker(tmp_path / "data", redis_url, tmp_path / "second.log", **env)
    try:
        await wait_for_backlog_zero(engine)
    finally:
        assert second.stop() == 0


def _settings(where: Path | Where, redis_url: str | None, **more) -> Settings:
    """Settings on tmp_path / "data" (SQLite), or on the `backend` fixture's store."""
    if isinstance(where, Where):
        return Settings(data_dir=str(where.data_dir / "data"), database_url=where.database_url, redis_url=redis_url,
                        **more)
    return Settings(data_dir=str(where / "data"), redis_url=redis_url, **more)


def _env(backend: Where) -> dict[str, str]:
    """What a worker process needs beside its data dir to use the test's store."""
    return {"SESSIONSEARCH_DATABASE_URL": backend.database_url} if backend.database_url else {}


async def test_import_search_worker_search(backend, tmp_path, redis_url):
    settings = _settings(backend, redis_url)
    pipeline = Pipeline(settings)
    async with Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:live", events=chain("live", [("user", "loan talk, live and indexed")])))
        await run_import(engine, DEMO)
        first = await engine.search(SearchParams(query="loan", limit=25))
        assert first["indexing"] is True and ids(first) == ["live1"]  # the partial hits, at once
        pipeline.reconciler.join_senders()  # a loaded machine may answer before the jobs are sent
        assert pipeline.queue_depth()["ready"] == 5  # the windows in scope: all but the incognito one
        worker = Worker(tmp_path / "data", redis_url, tmp_path / "worker.log", **_env(backend))
        try:
            await wait_for_backlog_zero(engine)
            second = await engine.search(SearchParams(query="loan", limit=25))
            assert "indexing" not in second and len(second["results"]) == 5
            assert "car-plans-01-m1" in ids(second) and "incognito-01-m1" not in ids(second)
        finally:
            assert worker.stop() == 0
    pipeline.close()


async def test_concurrent_searches_enqueue_each_window_once(backend, tmp_path, redis_url):
    settings = _settings(backend, redis_url)
    pipeline = Pipeline(settings)
    dedup = ssmetrics.get().enqueues_deduplicated
    before = dedup._value.get()
    async with Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue) as engine:
        await run_import(engine, DEMO)
        results = await asyncio.gather(*(engine.search(SearchParams(query="loan")) for _ in range(5)))
        assert all(r["indexing"] for r in results)
        pipeline.reconciler.join_senders()
        assert pipeline.queue_depth()["ready"] == 5  # five windows in scope, five messages
        assert dedup._value.get() - before == 4 * 5
        await engine.search(SearchParams(query="notary"))
        pipeline.reconciler.join_senders()
        assert pipeline.queue_depth()["ready"] == 5
    pipeline.close()


async def test_many_windows_are_marked_after_the_answer_and_queued_once_across_processes(backend, tmp_path, redis_url):
    settings = _settings(backend, redis_url)
    async with Engine(settings=settings) as engine:
        for n in range(60):  # more than a search marks inline: marking and sending go to a thread
            await engine.append(AppendParams(sessionKey=f"agent:main:s{n}", events=chain(f"s{n}-", [("user", f"ledger entry {n}")])), index=False)
    pipelines = [Pipeline(settings), Pipeline(settings)]  # two web processes, each its own dedup cache
    engines = [Engine(settings=settings, enqueuer=p.reconciler.enqueue) for p in pipelines]
    try:
        for engine in engines:
            await engine.open()
        results = await asyncio.gather(*(e.search(SearchParams(query="ledger")) for e in engines for _ in range(3)))
        assert all(r["indexing"] is True and r["results"] == [] for r in results)
        for pipeline in pipelines:
            pipeline.reconciler.join_senders()
        assert pipelines[0].queue_depth()["ready"] == 60  # each window once, whichever process marked it
    finally:
        for engine, pipeline in zip(engines, pipelines):
            await engine.close()
            pipeline.close()


async def test_a_rewind_hides_text_at_once_and_the_worker_restores_the_survivor(backend, tmp_path, redis_url):
    settings = _settings(backend, redis_url)
    pipeline = Pipeline(settings)
    worker = Worker(tmp_path / "data", redis_url, tmp_path / "worker.log", **_env(backend))
    key = "agent:main:plans"
    try:
        async with Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue) as engine:
            await engine.append(AppendParams(sessionKey=key, events=chain("m", [("user", "keep the boat"), ("assistant", "selling the boat"),
                                                 ("user", "boat buyer found")])))
            await engine.append(AppendParams(sessionKey=key, events=[leaf("l1", "m3", "m1"), msg("n1", "assistant", "keeping the boat", "l1")]))
            during = await engine.search(SearchParams(query="boat", limit=25))
            assert "m2" not in ids(during) and "m3" not in ids(during)
            assert during["indexing"] is True
            await wait_for_backlog_zero(engine)
            after = await engine.search(SearchParams(query="boat", limit=25))
            assert sorted(ids(after)) == ["m1", "n1"] and "indexing" not in after
    finally:
        assert worker.stop() == 0
        pipeline.close()


def big_window_text(i: int) -> str:
    return f"row {i} topic{i % 97}"


def _big_window(engine_dir: Path, n: int) -> None:
    """One imported window of n messages (unindexed), written as a gateway transcript."""
    sessions = engine_dir / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:big": {"sessionId": "big-1"}}))
    with open(sessions / "big-1.jsonl", "w") as fh:
        parent = None
        for i in range(n):
            mid = f"b{i}"
            fh.write(json.dumps({"type": "message", "id": mid, "parentId": parent,
                                 "message": {"role": "user" if i % 2 else "assistant",
                                             "content": big_window_text(i)}}) + "\n")
            parent = mid


def assert_index_is_the_window(data_dir: Path | Where, n: int) -> None:
    """The index rows, in rowid order, are exactly the window's n messages: each once, under the id of
    the transcript row it indexes, with that row's text (a count could not tell a duplicate under
    another rowid, a stale text or a row of another message from the right one). PostgreSQL keeps
    the tokens' counts, not the text: they must be those of the message's text."""
    expected = [(f"b{i}", big_window_text(i)) for i in range(n)]
    if isinstance(data_dir, Where) and data_dir.database_url:
        import psycopg
        with psycopg.connect(data_dir.database_url) as conn:
            rows = conn.execute("SELECT f.mid, f.tf, e.event_id, e.text, e.on_branch FROM ss_index f "
                                "LEFT JOIN ss_events e ON e.id = f.id ORDER BY f.id").fetchall()
        assert [(mid, tf) for mid, tf, *_ in rows] == [(mid, dict(Counter(tokens(t)))) for mid, t in expected]
    else:
        folder = data_dir.data_dir / "data" if isinstance(data_dir, Where) else data_dir
        with sqlite3.connect(folder / "agents" / "main.db") as conn:
            rows = conn.execute("SELECT f.mid, f.text, e.event_id, e.text, e.on_branch FROM msg_fts f "
                                "LEFT JOIN events e ON e.id = f.rowid ORDER BY f.rowid").fetchall()
        assert [(mid, text) for mid, text, *_ in rows] == expected
    assert [(event_id, text, on_branch) for _, _, event_id, text, on_branch in rows] == [(*e, 1) for e in expected]


async def test_two_worker_processes_on_one_large_window_leave_one_row_per_message(tmp_path, redis_url):
    _big_window(tmp_path / "state", 30_000)
    settings = _settings(tmp_path, redis_url)
    pipeline = Pipeline(settings)
    async with Engine(settings=settings) as engine:
        await run_import(engine, tmp_path / "state")
        (wid,) = (await engine.pending("main"))["main"]
        env = {"SESSIONSEARCH_RECONCILE_BATCH_ROWS": "500", "SESSIONSEARCH_CLAIM_LEASE_S": "1"}
        workers = [Worker(tmp_path / "data", redis_url, tmp_path / f"w{n}.log", **env) for n in range(2)]
        try:
            for _ in range(4):  # duplicates on purpose: at-least-once delivery must be harmless
                pipeline.reconciler.actor.send("main", wid)
            await wait_for_backlog_zero(engine)
        finally:
            for w in workers:
                assert w.stop() == 0
    assert_index_is_the_window(tmp_path / "data", 30_000)
    pipeline.close()


async def test_a_worker_killed_mid_job_loses_nothing(backend, tmp_path, redis_url):
    n = 120_000 if backend.kind == "sqlite" else 8_000  # PostgreSQL reconciles slower: mid-job sooner
    _big_window(tmp_path / "state", n)
    settings = _settings(backend, redis_url)
    env = {"SESSIONSEARCH_RECONCILE_BATCH_ROWS": "500", "SESSIONSEARCH_CLAIM_LEASE_S": "2", **_env(backend)}
    async with Engine(settings=settings) as engine:
        await run_import(engine, tmp_path / "state")
        first = Worker(tmp_path / "data", redis_url, tmp_path / "first.log", **env)
        await wait_until_mid_job(backend, first)
        first.kill()
        assert _one(backend, "SELECT needs_rebuild FROM windows", "SELECT needs_rebuild FROM ss_windows") == (1,)
        await finish_with_another_worker(engine, tmp_path, redis_url, env)
    assert_index_is_the_window(backend, n)


async def test_search_answers_while_redis_is_down_and_enqueues_once_it_is_back(backend, tmp_path):
    port = free_port()
    server = redis_server(port)
    url = f"redis://127.0.0.1:{port}/0"
    settings = _settings(backend, url)
    pipeline = Pipeline(settings)
    failures = ssmetrics.get().enqueue_failures
    try:
        async with Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue) as engine:
            await engine.append(AppendParams(sessionKey="agent:main:live", events=chain("live", [("user", "loan indexed live")])))
            await run_import(engine, DEMO)
            server.terminate()
            server.wait(10)
            before = failures._value.get()
            started = time.monotonic()
            down = await engine.search(SearchParams(query="loan"))
            assert time.monotonic() - started < 10
            assert down["indexing"] is True and ids(down) == ["live1"]
            assert failures._value.get() == before + 1
            server = redis_server(port)
            back = await engine.search(SearchParams(query="loan"))
            assert back["indexing"] is True and failures._value.get() == before + 1
            pipeline.reconciler.join_senders()
            assert pipeline.queue_depth()["ready"] == 5  # the next search tried again, and got through
    finally:
        pipeline.close()
        server.terminate()
        server.wait(10)


async def test_worker_metrics_show_the_workload(backend, tmp_path, redis_url):
    settings = _settings(backend, redis_url)
    pipeline = Pipeline(settings)
    async with Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue) as engine:
        await run_import(engine, DEMO)
        worker = Worker(tmp_path / "data", redis_url, tmp_path / "worker.log", **_env(backend))
        try:
            await wait_for_backlog_zero(engine)
            # a job may publish the windows beside its own (result.beside): the windows' count can
            # reach 6 before the last job has ended, clean, or "beside" when it started while the
            # window was in the other job's running transaction (two threads)
            done_outcomes = ("published", "clean", "beside")

            def six_reconciled() -> str | None:
                text = worker.scrape()
                jobs_done = sum(sample(text, "sessionsearch_reconcile_jobs_total", {"outcome": o}) or 0
                                for o in done_outcomes)
                return text if sample(text, "sessionsearch_reconciled_windows_total") == 6 and jobs_done >= 6 else None

            text = await until(six_reconciled, DEADLINE_S, "the worker's metrics to count 6 windows and jobs",
                               every=0.1)
            assert sample(text, "sessionsearch_reconcile_backlog", {"agent": "main"}) == 0
            assert sample(text, "sessionsearch_index_completeness", {"agent": "main", "unit": "messages"}) == 1.0
            assert sample(text, "sessionsearch_index_messages", {"agent": "work_bot", "state": "indexed"}) == 4
            assert sample(text, "sessionsearch_reconcile_rows_total", {"change": "inserted"}) == 18
            jobs = [sample(text, "sessionsearch_reconcile_jobs_total", {"outcome": o}) or 0
                    for o in done_outcomes]
            assert jobs[0] >= 2 and sum(jobs) == 6  # one job per window; one per agent at least publishes
            assert sample(text, "sessionsearch_reconcile_duration_seconds_count") == 6
            assert sample(text, "sessionsearch_queue_depth", {"queue": "ready"}) == 0
            assert sample(text, "sessionsearch_queue_up") == 1
            assert sample(text, "dramatiq_messages_total", {"actor_name": "reconcile"}) == 6
            assert sample(text, "sessionsearch_enqueues_total") == 6  # the startup sweep sent them
        finally:
            assert worker.stop() == 0
    pipeline.close()


def test_the_embedded_pipeline_reconciles_in_process_without_redis(backend, tmp_path):
    settings = _settings(backend, None)
    pipeline = Pipeline(settings)
    assert pipeline.embedded

    async def run():
        async with Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue) as engine:
            await run_import(engine, DEMO)
            assert (await engine.search(SearchParams(query="notary")))["indexing"] is True
            pipeline.start_embedded_worker()
            pipeline.broker.join("reconcile", timeout=30_000)
            pipeline.worker.join()
            done = await engine.search(SearchParams(query="notary"))
            assert "indexing" not in done
            assert sorted(ids(done)) == ["main-0001-m3", "main-0001-m6", "main-0001-m7"]

    try:
        asyncio.run(run())
    finally:
        pipeline.close()
    assert isinstance(pipeline.broker, dramatiq.brokers.stub.StubBroker)


def test_worker_processes_reconcile_at_idle_cpu_priority_unless_told_otherwise(tmp_path, redis_url):
    def policies(pid: int) -> set[tuple[int, int]]:  # (policy, nice) of every thread of the process
        out = set()
        for task in Path(f"/proc/{pid}/task").iterdir():
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            out.add((os.sched_getscheduler(int(task.name)), int(fields[16])))
        return out

    background = Worker(tmp_path / "data", redis_url, tmp_path / "idle.log")
    foreground = Worker(tmp_path / "data", redis_url, tmp_path / "normal.log", "--cpu-priority", "normal")
    try:
        (idle,) = background.job_processes()
        (normal,) = foreground.job_processes()
        # Dramatiq's threads, which inherit the policy
        wait_until(lambda: len(list(Path(f"/proc/{idle}/task").iterdir())) > 2, DEADLINE_S, "the job process's threads")
        assert {policy for policy, _ in policies(idle)} == {os.SCHED_IDLE}
        assert policies(normal) == {(os.SCHED_OTHER, os.nice(0))}
        assert [e["applied"] for e in background.events() if e.get("event") == "worker.cpu_priority"] == ["idle"]
        assert os.sched_getscheduler(os.getpid()) == os.SCHED_OTHER  # nothing leaks to whoever started it
    finally:
        assert background.stop() == 0 and foreground.stop() == 0


def test_worker_needs_redis_and_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SESSIONSEARCH_REDIS_URL"}
    env["SESSIONSEARCH_DATA_DIR"] = str(tmp_path)
    run = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "worker"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert run.returncode == 2 and "needs SESSIONSEARCH_REDIS_URL" in run.stderr


async def test_sigterm_mid_job_releases_the_claim_and_another_worker_finishes(tmp_path, redis_url):
    _big_window(tmp_path / "state", 120_000)
    settings = _settings(tmp_path, redis_url)
    # small batches: the job runs for seconds, longer than Dramatiq takes (up to 1 s) to pass the
    # signal on to the job's `should_stop`
    env = {"SESSIONSEARCH_RECONCILE_BATCH_ROWS": "10"}
    async with Engine(settings=settings) as engine:
        await run_import(engine, tmp_path / "state")
        first = Worker(tmp_path / "data", redis_url, tmp_path / "first.log", **env)
        db = tmp_path / "data" / "agents" / "main.db"
        await wait_until_mid_job(db, first)
        assert first.stop() == 0  # SIGTERM: the job stops between batches and hands the window on
        # every job this worker ran stopped: the one it was in, and the copy it handed on if its
        # other thread took that before the shutdown ended
        outcomes = [e["outcome"] for e in first.events() if e.get("event") in ("reconcile.published",
                                                                                 "reconcile.skipped")]
        with sqlite3.connect(db) as conn:
            claim, dirty = conn.execute("SELECT claim_token, needs_rebuild FROM windows").fetchone()
        assert outcomes and set(outcomes) == {"stopped"}, outcomes
        assert claim is None and dirty == 1  # released, still marked: nothing half-published
        await finish_with_another_worker(engine, tmp_path, redis_url, {"SESSIONSEARCH_RECONCILE_BATCH_ROWS": "500"})
    assert_index_is_the_window(tmp_path / "data", 120_000)


async def test_a_worker_stopped_mid_build_ends_the_build_and_exits(tmp_path, redis_url):
    settings = _settings(tmp_path, redis_url)
    async with Engine(settings=settings) as engine:
        for s in range(1_000):  # 100,000 messages of 40 words, each in 500+ of them: a build of seconds
            await engine.append(AppendParams(sessionKey=f"agent:main:s{s}", events=chain(f"s{s}m", [
                ("user", " ".join(f"w{(s * 7 + i * j) % 40}" for j in range(12))) for i in range(100)])))
    worker = Worker(tmp_path / "data", redis_url, tmp_path / "worker.log", SESSIONSEARCH_OPTIMIZE_EVERY_S="0.5")
    try:
        started = await until(lambda: next((e for e in worker.events() if e.get("event") == "optimize.started"),
                                           None), DEADLINE_S, lambda: worker.log_path.read_text()[-2000:], every=0.05)
    finally:
        assert worker.stop() == 0  # within terminate's 30 s: the build did not hold the stop
    events = [e["event"] for e in worker.events()]
    assert "optimize.stopped" in events and "optimize.done" not in events, events
    with pytest.raises(ProcessLookupError):
        os.kill(started["pid"], 0)  # the build's child is gone with the worker
    with sqlite3.connect(tmp_path / "data" / "agents" / "main.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


async def test_the_worker_rebuilds_common_words_postings_on_its_schedule(tmp_path, redis_url):
    settings = _settings(tmp_path, redis_url)
    async with Engine(settings=settings) as engine:
        for s in range(120):  # 12,000 messages, "loan talk" in 87 of every 100, "other words" in 12, "rare" in 120
            texts = [("user", "loan talk" if i % 8 else f"other words {s} {i}") for i in range(100)]
            texts[0] = ("user", "rare mention")
            await engine.append(AppendParams(sessionKey=f"agent:main:s{s}", events=chain(f"s{s}m", texts)))
        worker = Worker(tmp_path / "data", redis_url, tmp_path / "worker.log", SESSIONSEARCH_OPTIMIZE_EVERY_S="0.5")
        try:
            await until(lambda: [e for e in worker.events() if e.get("event") == "optimize.done"], DEADLINE_S,
                        lambda: f"optimize.done: {worker.log_path.read_text()[-2000:]}", every=0.1)
        finally:
            assert worker.stop() == 0
        done = next(e for e in worker.events() if e.get("event") == "optimize.done")
        assert done["agent"] == "main" and done["words"] == 4 and done["rows"] == 2 * 87 * 120 + 2 * 12 * 120
        with sqlite3.connect(tmp_path / "data" / "agents" / "main.db") as db:
            words = {w for (w,) in db.execute("SELECT word FROM hot_words")}
        assert words == {"loan", "talk", "other", "words"}  # in 500+ rows; "rare" in 120 is not
        first = await engine.search(SearchParams(query="loan", limit=5))
        assert len(first["results"]) == 5 and first["truncated"] is True
        assert first == await engine.search(SearchParams(query="loan", limit=5))  # the second from the postings
