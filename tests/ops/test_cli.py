"""The `sessionsearch search` and `history` commands, run as a user runs them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

from sessionsearch.protocol import AppendParams

from ..helpers import chain, engine_at

KEY = "agent:main:main"


def _cli(*args: str, data_dir) -> subprocess.CompletedProcess:
    env = {**os.environ, "SESSIONSEARCH_DATA_DIR": str(data_dir)}
    return subprocess.run([sys.executable, "-m", "sessionsearch.cli", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def _seed(path) -> None:
    async def seed():
        async with engine_at(path) as engine:
            await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "what about the loan?"),
                                                 ("assistant", "The loan is approved.")]), sessionId="s1"))
    asyncio.run(seed())


def test_search_prints_readable_hits_and_json(tmp_path):
    _seed(tmp_path)
    human = _cli("search", "loan", data_dir=tmp_path)
    assert human.returncode == 0, human.stderr
    assert "agent:main:main" in human.stdout and "The loan is approved." in human.stdout
    machine = _cli("search", "loan", "--json", "--role", "assistant", data_dir=tmp_path)
    assert [h["messageId"] for h in json.loads(machine.stdout)["results"]] == ["m2"]


def test_history_prints_messages_and_json(tmp_path):
    _seed(tmp_path)
    human = _cli("history", KEY, data_dir=tmp_path)
    assert human.returncode == 0 and "what about the loan?" in human.stdout
    machine = json.loads(_cli("history", KEY, "--json", "--message-id", "m2", "--session-id", "s1",
                              "--limit", "1", data_dir=tmp_path).stdout)
    assert [m["messageId"] for m in machine["messages"]] == ["m2"]


def test_errors_are_one_clear_line_and_exit_2(tmp_path):
    _seed(tmp_path)
    result = _cli("history", KEY, "--session-id", "s1", data_dir=tmp_path)
    assert result.returncode == 2 and result.stderr.strip() == "sessionsearch: sessionId requires messageId"
    machine = _cli("search", "x", "--limit", "99", "--json", data_dir=tmp_path)
    assert json.loads(machine.stdout)["error"]["code"] == "INVALID_REQUEST"


def test_status_shows_backlog_and_completeness(tmp_path):
    _seed(tmp_path)
    status = json.loads(_cli("status", "--json", data_dir=tmp_path).stdout)
    assert status["agents"] == [{"agentId": "main", "windows": 1, "indexedWindows": 1, "backlog": 0,
                                 "messages": 2, "indexedMessages": 2, "completeness": 1.0,
                                 "embeddedMessages": 0, "embeddingBacklog": 2}]  # no worker has embedded them


def test_the_store_flags_are_the_same_on_every_command_that_opens_a_store():
    from sessionsearch.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    store = {"--data-dir", "--config", "--database-url"}
    helps = {}
    for name, command in sub.choices.items():
        for action in command._actions:
            for flag in store & set(action.option_strings):
                helps.setdefault(flag, set()).add(action.help)
                helps.setdefault(name, set()).add(flag)
    assert all(len(helps[flag]) == 1 for flag in store), helps  # one declaration, one help text
    assert {name for name in sub.choices if helps.get(name) == store} == set(sub.choices) - {"token"}


def test_status_takes_the_redis_url_as_a_flag(tmp_path):
    _seed(tmp_path)
    down = _cli("status", "--json", "--redis-url", "redis://127.0.0.1:9/0", data_dir=tmp_path)
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)["queue"]["error"].startswith("queue unreachable")
    assert "queue" not in json.loads(_cli("status", "--json", data_dir=tmp_path).stdout)


def test_python_dash_m_sessionsearch_runs_the_command(tmp_path):
    _seed(tmp_path)
    env = {**os.environ, "SESSIONSEARCH_DATA_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", "sessionsearch", "search", "loan", "--json", "--role", "assistant"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert [h["messageId"] for h in json.loads(run.stdout)["results"]] == ["m2"]
    usage = subprocess.run([sys.executable, "-m", "sessionsearch"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: sessionsearch ")


def test_the_package_says_it_is_typed_and_ships_the_marker():
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert (root / "sessionsearch" / "py.typed").is_file()
    config = tomllib.loads((root / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["sessionsearch"]


QUESTION = "how much will I pay each month for the house?"


def _embedded(tmp_path) -> None:
    """A data dir whose messages are all embedded: written to a real server, whose in-process worker
    embeds them when a meaning search asks, then stopped."""
    from ..helpers import wait_until
    from ..server import Server

    srv = Server(tmp_path, tmp_path / "server.log")
    try:
        srv.post("transcript.append", {"sessionKey": KEY, "sessionId": "s1", "events": chain("m", [
            ("user", "I'm applying for a mortgage with Banca Sella."),
            ("assistant", "Over 25 years the monthly payment is about 1,151 EUR.")])})
        wait_until(lambda: "indexing" not in srv.post("sessions.search", {"query": QUESTION, "mode": "hybrid"})[1],
                   90, "the messages to be embedded")
    finally:
        assert srv.stop() == 0


def test_search_by_meaning_prints_how_each_hit_was_found(tmp_path):
    _embedded(tmp_path)
    assert _cli("search", *QUESTION.split(), data_dir=tmp_path).stdout == "no matches\n"  # keyword: not every word
    human = _cli("search", "--mode", "hybrid", *QUESTION.split(), data_dir=tmp_path)
    assert human.returncode == 0, human.stderr
    first = human.stdout.splitlines()[:2]
    assert first[0].startswith(" 1. ") and "[s1 / m2]" in first[0] and first[0].endswith("  by semantic"), first
    assert "monthly payment is about 1,151 EUR" in first[1]
    machine = json.loads(_cli("search", "--mode", "semantic", "--json", QUESTION, data_dir=tmp_path).stdout)
    assert [(h["messageId"], h["matchedBy"]) for h in machine["results"]][:1] == [("m2", ["semantic"])]
    both = _cli("search", "--mode", "hybrid", "monthly", "payment", data_dir=tmp_path).stdout
    assert "by keyword+semantic" in both.splitlines()[0]
    sessions = _cli("search", "--mode", "hybrid", "--sessions", *QUESTION.split(), data_dir=tmp_path).stdout
    assert sessions.startswith(" 1. agent:main:main  1 hit(s), best ") and "[s1 / m2]  by semantic\n" in sessions
    plain = _cli("search", "monthly", "payment", data_dir=tmp_path).stdout
    assert "[s1 / m2]" in plain and " by " not in plain.splitlines()[0]  # keyword output as it always was


def test_a_mode_the_search_cannot_take_is_one_clear_line(tmp_path):
    _seed(tmp_path)
    recent = _cli("search", "loan", "--mode", "semantic", "--recent", data_dir=tmp_path)
    assert recent.returncode == 2 and recent.stderr == 'sessionsearch: order "recent" needs mode "keyword"\n'
    env = {**os.environ, "SESSIONSEARCH_DATA_DIR": str(tmp_path), "SESSIONSEARCH_EMBEDDER": "none"}
    off = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "search", "loan", "--mode", "hybrid"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert off.returncode == 2 and off.stderr == "sessionsearch: semantic search is disabled\n"
    bad = _cli("search", "loan", "--mode", "vector", data_dir=tmp_path)
    assert bad.returncode == 2 and "invalid choice: 'vector'" in bad.stderr


def test_status_shows_how_many_messages_are_embedded_and_waiting(tmp_path):
    _embedded(tmp_path)
    status = json.loads(_cli("status", "--json", data_dir=tmp_path).stdout)["agents"][0]
    assert (status["embeddedMessages"], status["embeddingBacklog"]) == (2, 0)
    head, row = _cli("status", data_dir=tmp_path).stdout.splitlines()[:2]
    assert head.split()[-3:] == ["embedded", "to", "embed"]
    assert row.split()[0] == "main" and row.split()[-2:] == ["2", "0"]


def test_reconcile_also_embeds_so_a_search_by_meaning_is_complete_without_a_worker(tmp_path):
    _seed(tmp_path)  # appended without a worker: indexed, not yet embedded
    waiting = json.loads(_cli("search", "--mode", "semantic", "--json", "is the loan approved", data_dir=tmp_path).stdout)
    assert waiting["indexing"] is True and waiting["results"] == []
    run = _cli("reconcile", data_dir=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[:2] == ["reconciled: nothing to do", "meaning index: embedded 1"]
    done = json.loads(_cli("search", "--mode", "semantic", "--json", "is the loan approved", data_dir=tmp_path).stdout)
    assert "indexing" not in done and done["results"][0]["messageId"] == "m2"
    again = json.loads(_cli("reconcile", "--json", data_dir=tmp_path).stdout)
    assert again["embedOutcomes"] == {} and again["agents"][0]["embeddingBacklog"] == 0
