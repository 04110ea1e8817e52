"""Every process logs one shape: a JSON object per line with event, level and timestamp, and no
terminal colour escapes, in `serve --workers N`'s children and the worker's job processes too."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sessionsearch.protocol import AppendParams

from ..helpers import chain, leaf, msg, wait_until
from ..reconcile.test_pipeline import Worker
from ..server import Server

DEADLINE_S = 90  # only tells "done" from "stuck": the jobs below end within seconds
KEY = "agent:main:logs"
ACCESS = re.compile(r'^127\.0\.0\.1:\d+ - "(GET|POST) (\S+) HTTP/1\.1" (\d{3})$')


def log_lines(path: Path) -> list[dict]:
    """Every line of a process's combined stdout and stderr, each required to be one JSON object
    with the common keys and no ANSI escape (raw or JSON-escaped)."""
    text = path.read_text()
    assert "\x1b" not in text and "\\u001b" not in text, text[-3000:]
    events = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            raise AssertionError(f"a line of {path.name} is not JSON: {line!r}") from None
        assert isinstance(event, dict) and {"event", "level", "timestamp"} <= event.keys(), line
        assert "color_message" not in event, line
        events.append(event)
    return events


def test_serve_with_two_workers_and_a_worker_with_two_processes_log_only_json_lines(tmp_path, redis_url):
    data = tmp_path / "data"
    worker = Worker(data, redis_url, tmp_path / "worker.log", "--processes", "2", "--threads", "8")
    web = Server(data, tmp_path / "web.log", "--workers", "2", SESSIONSEARCH_REDIS_URL=redis_url,
                 SESSIONSEARCH_LOG_LEVEL="INFO")
    try:
        wait_until(lambda: len(set(worker.job_processes())) == 2, DEADLINE_S, "both job processes to start")
        events = chain("m", [("user", "the ferry leaves at noon"), ("assistant", "noted, the ferry at noon"),
                             ("user", "ferry tickets bought")])
        assert web.post("transcript.append", {"sessionKey": KEY, "events": events})[0] == 200
        rewind = [leaf("l1", "m3", "m1"), msg("n1", "assistant", "the ferry leaves at one", "l1")]
        assert web.post("transcript.append", {"sessionKey": KEY, "events": rewind})[0] == 200
        assert web.post("sessions.search", {"query": "ferry"})[1]["indexing"] is True  # a job for the worker
        requests = 12
        for _ in range(requests):  # spread over both children (the kernel picks one per connection)
            assert web.post("sessions.search", {"query": "ferry"})[0] == 200
        assert web.get("/readyz")[0] == 200

        def reconciled() -> bool:
            status, body = web.post("sessions.search", {"query": "ferry"})
            return status == 200 and not body.get("indexing")

        wait_until(reconciled, DEADLINE_S, "the worker to reconcile the rewound window", every=0.1)
    finally:
        assert web.stop() == 0
        assert worker.stop() == 0
    web_events = log_lines(web.log_path)
    access = [e for e in web_events if ACCESS.match(e["event"])]
    for event in access:  # the line's parts as fields too
        method, path, status = ACCESS.match(event["event"]).groups()  # type: ignore[union-attr]
        assert (event["method"], event["path"], event["status"]) == (method, path, int(status)), event
    paths = [e["path"] for e in access]
    assert paths.count("/v1/sessions.search") >= requests + 2 and "/readyz" in paths, paths
    assert paths.count("/v1/transcript.append") == 2
    assert sum(e["event"] == "api.started" for e in web_events) == 2  # each child's own lifespan
    worker_events = log_lines(worker.log_path)
    assert {e["event"] for e in worker_events} >= {"worker.started", "worker.cpu_priority", "reconcile.published"}


async def test_a_postings_build_in_a_child_logs_json_at_its_parents_level(tmp_path, capfd):
    """The build `serve` and the worker run in a spawned child: nothing of the parent's set-up
    crosses, so the child sets up the same JSON lines, at the level the parent logs."""
    import logging

    from sessionsearch import Engine, Settings
    from sessionsearch import logging as sslogging
    from sessionsearch.worker.optimize import build_in_child

    settings = Settings(data_dir=str(tmp_path / "data"))
    async with Engine(settings=settings) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("m", [("user", "harbor lantern copper")])))
    try:
        sslogging.configure("INFO")
        capfd.readouterr()
        outcome = build_in_child(settings, None, cpu_priority="normal")
        assert "main" in outcome["agents"], outcome
        lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
        events = [json.loads(line) for line in lines]  # every line JSON, the child's too
        assert "optimize.started" in {e["event"] for e in events}
        assert "store.file_budget" in {e["event"] for e in events}  # the child's engine, logged by the child
        sslogging.configure("WARNING")
        capfd.readouterr()
        build_in_child(settings, None, cpu_priority="normal")
        assert capfd.readouterr().err.strip() == ""  # the parent's level holds in the child
    finally:
        sslogging.configure("WARNING")
        logging.getLogger().setLevel(logging.WARNING)
