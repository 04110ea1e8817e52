"""Scale-out shown, not claimed (issue 12): two `sessionsearch serve` processes on different ports
and three `sessionsearch worker` processes against one PostgreSQL database and one Redis. A
multi-agent state dir is imported on one host and searched through the other web process
(`indexing: true` first, complete later); both web processes append to one session at once; a
worker is SIGKILLed in the middle of reconciling a large window and restarted; the index then
equals a full rebuild, row for row."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from ..helpers import msg, wait_until
from ..postgres import scratch_database
from ..reconcile.test_pipeline import Worker
from ..scale_out import BIG_ROWS, cli, index_snapshot, mark_everything_for_rebuild, window_state, write_state_dir
from ..server import Server
from .test_deploy import _named_metrics, _sample_names

APPENDS = 15  # per web process, two messages each


def _append_through(web: Server, tag: str, failures: list) -> None:
    """Parentless messages (they continue from the current leaf) to one session shared by both web
    processes, and to a session of this writer's own in another agent."""
    for k in range(APPENDS):
        for key in ("agent:main:live", f"agent:work:live-{tag}"):
            status, body = web.post("transcript.append", {"sessionKey": key, "events": [
                msg(f"{tag}-{k}-q", "user", f"live question {k} from {tag} harbour"),
                msg(f"{tag}-{k}-a", "assistant", f"live answer {k} for {tag} harbour")]})
            if status != 200 or body["appended"] != 2:
                failures.append((key, status, body))


def _complete(web: Server):
    status, body = web.post("index.status", {})
    agents = body["agents"]
    if status != 200 or not all(a["backlog"] == 0 and a["completeness"] == 1.0 for a in agents):
        return None
    found = web.post("sessions.search", {"query": "shared words", "limit": 25})[1]
    return None if found.get("indexing") else agents


def _answers(web: Server) -> list:
    bodies = [{"query": "topic7", "agentId": "main", "limit": 25}, {"query": "harbour", "limit": 25},
              {"query": "shared", "resultMode": "sessions", "limit": 25},
              {"query": "row 11", "agentId": "work", "order": "recent"}, {"query": "live answ", "match": "prefix"}]
    return [web.post("sessions.search", body)[1] for body in bodies]


def test_two_web_processes_and_three_workers_share_one_database_and_the_index_equals_a_rebuild(tmp_path, redis_url):
    expected = write_state_dir(tmp_path / "state")
    with scratch_database("scaleout") as url:
        shared = {"SESSIONSEARCH_DATABASE_URL": url, "SESSIONSEARCH_REDIS_URL": redis_url}
        host_a, host_b = (Server(tmp_path / f"host-{h}", tmp_path / f"web-{h}.log", **shared) for h in "ab")
        workers: list[Worker] = []
        try:
            assert host_a.port != host_b.port
            cli("import", str(tmp_path / "state"), env={**shared, "SESSIONSEARCH_DATA_DIR": str(tmp_path / "host-a")})
            first = host_b.post("sessions.search", {"query": "topic7", "agentId": "main"})[1]
            assert first["indexing"] is True and first["results"] == []  # imported, not yet reconciled

            big_wid = window_state(url, "main-w0")[0]
            env = {**shared, "SESSIONSEARCH_RECONCILE_BATCH_ROWS": "50", "SESSIONSEARCH_CLAIM_LEASE_S": "2",
                   "SESSIONSEARCH_RECONCILE_SWEEP_EVERY_S": "1"}
            workers = [Worker(tmp_path / f"host-w{n}", redis_url, tmp_path / f"worker{n}.log", **env)
                       for n in range(3)]
            failures: list = []
            writers = [threading.Thread(target=_append_through, args=(web, tag, failures))
                       for web, tag in ((host_a, "a"), (host_b, "b"))]
            for w in writers:
                w.start()

            def holder():
                for worker in workers:
                    if any(e.get("event") == "reconcile.claimed" and e.get("wid") == big_wid for e in worker.events()):
                        return worker
            victim = wait_until(holder, what="a worker to claim the large window", every=0.1)
            victim.kill()  # SIGKILL, mid-reconcile: its claim stays until the lease runs out
            _, needs_rebuild, token = window_state(url, "main-w0")
            assert needs_rebuild == 1 and token is not None, "the worker finished before it could be killed"
            workers.remove(victim)
            # as its unit's Restart= would: a new worker's startup sweep sends the window again (the job
            # the dead one took comes back from Redis only after Dramatiq's heartbeat timeout), and
            # it takes the claim over once the lease has run out
            workers.append(Worker(tmp_path / "host-w3", redis_url, tmp_path / "worker3.log", **env))
            for w in writers:
                w.join(120)
            assert failures == []

            agents = wait_until(lambda: _complete(host_b), 120, "the index to complete", every=0.1)
            assert {a["agentId"] for a in agents} == {"main", "work", "ops-2"}
            history = host_a.post("sessions.history", {"sessionKey": "agent:main:live", "limit": 1000})[1]
            ids = [m["messageId"] for m in history["messages"]]
            assert len(ids) == len(set(ids)) == 4 * APPENDS  # nothing lost, nothing twice
            for tag in "ab":  # each writer's messages in the order it sent them
                assert [i for i in ids if i.startswith(f"{tag}-")] == [
                    f"{tag}-{k}-{r}" for k in range(APPENDS) for r in ("q", "a")]
            expected["agent:main:live"] = set(ids)
            for tag in "ab":
                expected[f"agent:work:live-{tag}"] = {f"{tag}-{k}-{r}" for k in range(APPENDS) for r in ("q", "a")}

            rows, windows = index_snapshot(url)
            indexed: dict[str, set[str]] = {}
            for _, key, mid, *_ in rows:
                indexed.setdefault(key, set()).add(mid)
            assert len(rows) == sum(len(v) for v in expected.values())
            assert indexed == expected
            assert len(expected["agent:main:s0"]) == BIG_ROWS
            answers = _answers(host_b)
            assert answers[1]["results"] and all("indexing" not in a for a in answers)

            # every worker's: a worker that ran no job has no sample of the job counters (the jobs
            # take up to 64 windows each, so one of three may run none)
            names = _sample_names(host_a.get("/metrics")[1]) | _sample_names(host_b.get("/metrics")[1])
            for worker in workers:
                names |= _sample_names(worker.scrape())
            for name in sorted(_named_metrics()):  # what deploy/'s alert rules and dashboard read, on PostgreSQL
                assert name in names or f"{name}_total" in names, f"{name} is not exported with PostgreSQL"

            # a full rebuild of every window, in one process, changes nothing
            mark_everything_for_rebuild(url)
            cli("reconcile", "--json", env={**shared, "SESSIONSEARCH_DATA_DIR": str(tmp_path / "host-a")})
            # the workers still run: their periodic sweep may have claimed a window the CLI then left
            # to them, so the rebuild is done when no window is marked or claimed
            def rebuilt():
                snapshot = index_snapshot(url)
                return None if any(needs or token for _, needs, token, *_ in snapshot[1]) else snapshot
            after = wait_until(rebuilt, what="every window rebuilt", every=0.1)
            assert after == (rows, windows)
            assert _answers(host_b) == answers
        finally:
            with ThreadPoolExecutor() as pool:  # all at once: each waits for its own graceful stop
                codes = list(pool.map(lambda process: process.stop(), [*workers, host_a, host_b]))
            assert codes == [0] * len(codes)
