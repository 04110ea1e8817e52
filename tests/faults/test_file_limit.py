"""A real `sessionsearch serve` on SQLite under an open-file limit of 256 (hard and soft, as
`ulimit -n 256` sets it) with 1,000 agents: every append and every search, of one agent and of
them all, is answered, none with a 500 or a 503, and every message appended is found afterwards.
The server keeps as many agent stores open as its limit leaves room for (limits.py) and closes the
least recently used ones for the next."""

from __future__ import annotations

import resource
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sessionsearch.store.sqlite.writer import create_database

from ..helpers import chain
from ..server import Server

LIMIT = 256
AGENTS = [f"a{i:04d}" for i in range(1000)]
CLIENTS = 4  # requests in flight at once
MADE_BEFORE = 900  # agents whose (empty) databases exist before the server starts: making one
# migrates it, ~0.1 s, not what this test is about; the other 100 are made by their first append


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def _make_agents(data_dir: Path, agents: list[str]) -> None:
    """Empty, migrated databases for `agents`, as their first open would make them."""
    folder = data_dir / "agents"
    folder.mkdir(parents=True)
    template = folder / f"{agents[0]}.db"
    create_database(template, data_dir / "cold" / agents[0], busy_timeout_ms=5000)
    for agent in agents[1:]:
        shutil.copyfile(template, folder / f"{agent}.db")


def _append(server: Server, agent: str) -> tuple[str, int, object]:
    events = chain(f"{agent}m", [("user", f"harbor beacon {agent}x first"), ("assistant", f"{agent}x second")])
    status, body = server.post("transcript.append", {"sessionKey": f"agent:{agent}:main", "events": events})
    return agent, status, body


def _search(server: Server, body: dict) -> tuple[dict, int, object]:
    status, found = server.post("sessions.search", body)
    return body, status, found


def test_a_thousand_agents_under_256_open_files_are_all_stored_and_found_without_a_500_or_503(tmp_path):
    _make_agents(tmp_path / "data", AGENTS[:MADE_BEFORE])
    server = Server(tmp_path / "data", tmp_path / "server.log", preexec_fn=_limit_files)
    try:
        log = server.log_path.read_text()
        assert '"agents_open_max": 14' in log and '"limit": 256' in log, log[-2000:]
        with ThreadPoolExecutor(CLIENTS) as pool:
            appended = list(pool.map(lambda agent: _append(server, agent), AGENTS))
            assert [(a, s) for a, s, _ in appended if s != 200] == [], [b for _, s, b in appended if s != 200][:3]
            assert {body["appended"] for _, _, body in appended} == {2}  # type: ignore[index]

            # one agent at a time, spread over all of them: each its own messages
            one = [{"query": f"{agent}x", "agentId": agent, "limit": 5} for agent in AGENTS[::10]]
            # every agent at once: each search opens every store in turn
            every = [{"query": "harbor", "limit": 25}, {"query": "beacon", "order": "recent", "limit": 25}]
            answered = list(pool.map(lambda body: _search(server, body), one + every))
        assert [(b, s, f) for b, s, f in answered if s != 200] == []
        for body, _, found in answered[:len(one)]:
            agent = body["agentId"]
            assert sorted(h["messageId"] for h in found["results"]) == [f"{agent}m1", f"{agent}m2"], found
        by_query = {b["query"]: f for b, _, f in answered[len(one):]}
        assert len(by_query["harbor"]["results"]) == 25 and len(by_query["beacon"]["results"]) == 25

        # nothing lost: every agent holds both its messages
        status, index = server.post("index.status", {})
        assert status == 200
        counts = {a["agentId"]: a["messages"] for a in index["agents"]}
        assert counts == {agent: 2 for agent in AGENTS}
    finally:
        assert server.stop() == 0
    log = server.log_path.read_text()
    assert "api.crashed" not in log and "Too many open files" not in log, log[-3000:]
