"""Import of the gateway's legacy state dir (SPEC §7): problems reported, valid rows kept, re-runs harmless."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sessionsearch import importer
from sessionsearch.importer import run_import
from sessionsearch.protocol import HistoryParams, ListParams, SearchParams, SessionRef

from ..helpers import engine_at, ids

DEMO = Path(__file__).resolve().parents[2] / "sessionsearch" / "demo_data"


def _write_state(root: Path) -> Path:
    sessions = root / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "sessions.json").write_text(json.dumps({
        "agent:main:good": {"sessionId": "good-1", "label": "Good one", "updatedAt": 1767323045000},
        "agent:main:gone": {"sessionId": "gone-1"},
        "agent:main:broken": {"label": "no session id"},
        "dm:+1555": {"sessionId": "dm-1", "kind": "robot"},
    }))
    lines = [
        json.dumps({"type": "session", "version": 3, "id": "good-1"}),
        json.dumps({"type": "message", "id": "g1", "parentId": None, "message": {"role": "user", "content": "alpha one"}}),
        "{not json",
        json.dumps({"type": "teleport", "id": "t1"}),
        json.dumps({"type": "message", "id": "g2", "parentId": "g1", "message": {"role": 5, "content": "x"}}),
        "",
        json.dumps({"type": "message", "id": "g3", "parentId": "g1", "message": {"role": "assistant", "content": "alpha two"}}),
    ]
    (sessions / "good-1.jsonl").write_text("\n".join(lines) + "\n")
    (sessions / "dm-1.jsonl").write_text(json.dumps(
        {"type": "message", "id": "d1", "parentId": None, "message": {"role": "user", "content": "alpha dm"}}) + "\n")
    (sessions / "stray-9.jsonl").write_text(json.dumps(
        {"type": "message", "id": "s1", "parentId": None, "message": {"role": "user", "content": "alpha stray"}}) + "\n")
    return root


async def test_bad_lines_are_reported_with_file_and_line_and_valid_rows_are_kept(tmp_path):
    state = _write_state(tmp_path / "state")
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, state)
        problems = {(Path(p.file).name, p.line): p.message for p in report.problems}
        assert problems[("good-1.jsonl", 3)].startswith("not JSON")
        assert "unknown event type 'teleport'" in problems[("good-1.jsonl", 4)]
        assert "message.role" in problems[("good-1.jsonl", 5)]
        messages = [p.message for p in report.problems]
        assert "entry 'agent:main:broken' has no sessionId; skipped" in messages
        assert any("missing transcript of agent:main:gone" in m for m in messages)
        assert "entry 'dm:+1555': unknown kind 'robot'; ignored" in messages
        assert report.events == 5  # header, g1, g3, d1, s1
        await engine.reconcile_pending()
        found = await engine.search(SearchParams(query="alpha", limit=25))
        assert sorted(ids(found)) == ["d1", "g1", "g3", "s1"]
        keys = {h["sessionKey"] for h in found["results"]}
        assert keys == {"agent:main:good", "agent:main:dm:+1555", "agent:main:imported:stray-9"}
        listed = {s["sessionKey"]: s for s in (await engine.list_sessions())["sessions"]}
        assert listed["agent:main:good"]["label"] == "Good one"


async def test_a_second_import_adds_nothing_and_loses_nothing(tmp_path):
    state = _write_state(tmp_path / "state")
    async with engine_at(tmp_path / "data") as engine:
        first = await run_import(engine, state)
        second = await run_import(engine, state)
        assert first.events == 5 and second.events == 0
        assert sum(f.skipped_lines for f in second.files) == sum(f.lines for f in first.files)
        await engine.reconcile_pending()
        assert len((await engine.search(SearchParams(query="alpha", limit=25)))["results"]) == 4


async def test_a_grown_file_imports_only_its_new_lines(tmp_path):
    state = _write_state(tmp_path / "state")
    async with engine_at(tmp_path / "data") as engine:
        await run_import(engine, state)
        with open(state / "agents" / "main" / "sessions" / "good-1.jsonl", "a") as fh:
            fh.write(json.dumps({"type": "message", "id": "g4", "parentId": "g3",
                                 "message": {"role": "user", "content": "alpha three"}}) + "\n")
        again = await run_import(engine, state)
        assert again.events == 1
        await engine.reconcile_pending()
        history = await engine.history(HistoryParams(sessionKey="agent:main:good"))
        assert [m["messageId"] for m in history["messages"]] == ["g1", "g3", "g4"]


async def test_one_agent_or_one_file_can_be_imported(tmp_path):
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, DEMO, agent_id="work_bot")
        assert {f.session_key for f in report.files} == {"agent:work_bot:main"}
        one = await run_import(engine, DEMO / "agents" / "main" / "sessions" / "dm-maria-01.jsonl")
        assert [f.session_key for f in one.files] == ["agent:main:whatsapp:dm:+15550001"]
        assert sorted(engine.agent_ids_on_disk()) == ["main", "work_bot"]


async def test_the_demo_state_dir_imports_cleanly_and_reconciles_to_the_active_branch(tmp_path):
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, DEMO)
        assert report.problems == [] and report.sessions == 6
        assert (await engine.search(SearchParams(query="loan")))["indexing"] is True
        await engine.reconcile_pending()
        assert ids(await engine.search(SearchParams(query="abandoned plan"))) == []  # rewound away
        assert ids(await engine.search(SearchParams(query="smaller deposit"))) == ["car-plans-01-m5"]
        assert ids(await engine.search(SearchParams(query="東京"))) and ids(await engine.search(SearchParams(query="北京")))
        assert ids(await engine.search(SearchParams(query="surprise party"))) == []  # incognito


def test_the_import_command_prints_a_summary_per_file_and_json(tmp_path):
    state = _write_state(tmp_path / "state")
    env = {**os.environ, "SESSIONSEARCH_DATA_DIR": str(tmp_path / "data")}
    run = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "import", str(state)], capture_output=True,
                         text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "good-1.jsonl: 3 events -> agent:main:good (3 bad lines)" in run.stdout
    assert "good-1.jsonl:3: not JSON" in run.stdout
    again = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "import", str(state), "--json"],
                           capture_output=True, text=True, env=env, timeout=60)
    report = json.loads(again.stdout)
    # the re-run skips the lines the first run consumed, so only the problems of sessions.json's
    # entries come back; the bad lines are reported once, by the run that read them
    assert report["events"] == 0
    assert sorted((Path(p["file"]).name, p["line"]) for p in report["problems"]) == [
        ("gone-1.jsonl", None), ("sessions.json", None), ("sessions.json", None)]
    shutil.rmtree(tmp_path / "data")
    fresh = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "import", str(state), "--json"],
                           capture_output=True, text=True, env=env, timeout=60)
    report = json.loads(fresh.stdout)
    assert report["events"] == 5
    assert sorted((Path(p["file"]).name, p["line"]) for p in report["problems"]) == [
        ("gone-1.jsonl", None), ("good-1.jsonl", 3), ("good-1.jsonl", 4), ("good-1.jsonl", 5),
        ("sessions.json", None), ("sessions.json", None)]


# -- hostile or broken state dirs ------------------------------------------------------------------

def _line(mid: str, text: str, parent: str | None = None, **message: object) -> str:
    return json.dumps({"type": "message", "id": mid, "parentId": parent,
                       "message": {"role": "user", "content": text, **message}})


def _sessions_dir(state: Path, agent: str = "main") -> Path:
    sessions = state / "agents" / agent / "sessions"
    sessions.mkdir(parents=True)
    return sessions


def _cli_import(*args: str, data: Path) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "SESSIONSEARCH_DATA_DIR": str(data)}
    run = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "import", *args, "--json"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.stdout, run.stderr
    return run, json.loads(run.stdout)


def _where(report: dict) -> set[tuple[str, int | None]]:
    return {(Path(p["file"]).name, p["line"]) for p in report["problems"]}


async def _ids_found(data: Path, query: str) -> list[str]:
    async with engine_at(data) as engine:
        await engine.reconcile_pending()
        return sorted(ids(await engine.search(SearchParams(query=query, limit=25))))


def test_a_session_id_that_names_a_path_outside_its_sessions_dir_is_rejected_and_the_rest_imported(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text(_line("x1", "alpha secret") + "\n")
    (outside / "abs.jsonl").write_text(_line("x2", "alpha absolute") + "\n")
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    (sessions / "sessions.json").write_text(json.dumps({
        "agent:main:good": {"sessionId": "good-1"},
        "agent:main:climb": {"sessionId": "../../../../outside/secret"},
        "agent:main:abs": {"sessionId": str(outside / "abs")},
        "agent:main:nul": {"sessionId": "good-1\u0000x"},
        "agent:main:dots": {"sessionId": ".."},
    }))
    (sessions / "good-1.jsonl").write_text(_line("g1", "alpha good") + "\n")
    run, report = _cli_import(str(state), data=tmp_path / "data")
    assert run.returncode == 0, run.stderr
    messages = [p["message"] for p in report["problems"] if Path(p["file"]).name == "sessions.json"]
    for key in ("agent:main:climb", "agent:main:abs", "agent:main:nul", "agent:main:dots"):
        assert any(key in m and "sessionId" in m for m in messages), (key, report["problems"])
    assert [f["session_key"] for f in report["files"]] == ["agent:main:good"]
    assert report["events"] == 1 and report["sessions"] == 1
    assert asyncio.run(_ids_found(tmp_path / "data", "alpha")) == ["g1"]


def test_an_agent_option_that_is_not_an_agent_id_is_refused_and_nothing_is_written(tmp_path):
    sessions = tmp_path / "loose" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "one-1.jsonl").write_text(_line("o1", "alpha loose") + "\n")
    data = tmp_path / "data"
    for bad in ("../escaped", "main\n", "", "a" * 65):
        run, answer = _cli_import(str(sessions), "--agent", bad, data=data)
        assert run.returncode == 2, (bad, run.stdout, run.stderr)
        assert answer["error"]["code"] == "INVALID_REQUEST"
        assert "agentId must be 1..64 letters, digits, '_' or '-'" in answer["error"]["message"]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.db*")) == []


async def test_agent_directories_whose_names_are_not_agent_ids_are_reported_and_skipped(tmp_path):
    state = tmp_path / "state"
    for agent in ("main", "main\n", "two words"):
        (_sessions_dir(state, agent) / "s-1.jsonl").write_text(_line(f"m-{len(agent)}", "alpha") + "\n")
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, state)
        assert {(Path(p.file).name, p.message) for p in report.problems} == {
            ("main\n", "not a valid agent id; skipped"), ("two words", "not a valid agent id; skipped"),
            ("sessions.json", "missing; transcripts imported under generated keys")}
        assert report.events == 1
        assert {p.name.partition(".db")[0] for p in (tmp_path / "data" / "agents").iterdir()} == {"main"}


def _unstorable_lines() -> list[str]:
    """Line 1 and line 9 are valid; every line between is bad in a way that once cost more than itself."""
    return [
        _line("u1", "alpha first"),
        _line("u2", "alpha huge", timestamp=1e400),  # json reads inf
        _line("u3", "alpha far", timestamp=1e30),
        _line("u4", "alpha before", timestamp=-1e30),
        _line("u5", "alpha nan", timestamp=float("nan")),  # json.dumps writes NaN, json.loads reads it
        '{"type": "message", "id": "u6", "parentId": null, "message": {"role": "user", "content": "alpha \\ud800"}}',
        "[" * 100_000 + "]" * 100_000,  # deep nesting: RecursionError in the parser
        '{"type": "message", "id": "u8", "parentId": null, "timestamp": 1e400, "message": {"role": "user", '
        '"content": "alpha event time"}}',
        _line("u9", "alpha last", "u1"),
    ]


async def test_a_line_with_an_unstorable_number_or_a_lone_surrogate_costs_only_that_line(tmp_path):
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:bad": {"sessionId": "bad-1"},
                                                        "agent:main:fine": {"sessionId": "fine-1"}}))
    (sessions / "bad-1.jsonl").write_text("\n".join(_unstorable_lines()) + "\n")
    (sessions / "fine-1.jsonl").write_text(_line("f1", "alpha fine") + "\n")
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, state)
        print([str(p) for p in report.problems])
        assert sorted((Path(p.file).name, p.line) for p in report.problems) == [
            ("bad-1.jsonl", n) for n in range(2, 9)]
        assert report.events == 3
        assert {f.session_key: (f.lines, f.imported, f.bad) for f in report.files} == {
            "agent:main:bad": (9, 2, 7), "agent:main:fine": (1, 1, 0)}
        again = await run_import(engine, state)
        assert again.events == 0 and again.problems == []
        await engine.reconcile_pending()
        assert sorted(ids(await engine.search(SearchParams(query="alpha", limit=25)))) == ["f1", "u1", "u9"]


def test_one_unstorable_line_through_the_command_is_reported_and_does_not_abort_the_import(tmp_path):
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    lines = _unstorable_lines()
    (sessions / "a-1.jsonl").write_text("\n".join([lines[0], lines[1], lines[-1]]) + "\n")
    (sessions / "b-1.jsonl").write_text(_line("b1", "alpha b") + "\n")
    run, report = _cli_import(str(state), data=tmp_path / "data")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert _where(report) == {("a-1.jsonl", 2), ("sessions.json", None)}
    assert report["events"] == 3


async def test_a_key_of_another_agent_is_stored_under_that_agent_where_history_and_search_find_it(tmp_path):
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    (sessions / "sessions.json").write_text(json.dumps({
        "agent:main:home": {"sessionId": "home-1"},
        "agent:ops:x": {"sessionId": "ops-1", "label": "Ops window"},
    }))
    (sessions / "home-1.jsonl").write_text(_line("h1", "alpha home") + "\n")
    (sessions / "ops-1.jsonl").write_text(_line("o1", "alpha ops") + "\n" + _line("o2", "beta ops", "o1") + "\n")
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, state)
        assert report.problems == [] and report.events == 3
        assert [(Path(n.file).name, n.message) for n in report.notes] == [
            ("sessions.json", "entry 'agent:ops:x' names agent ops; stored under that agent")]
        assert report.to_dict()["notes"] == [{"file": str(sessions / "sessions.json"), "line": None,
                                             "message": "entry 'agent:ops:x' names agent ops; stored under that agent"}]
        again = await run_import(engine, state)
        assert again.events == 0
        await engine.reconcile_pending()
        history = await engine.history(HistoryParams(sessionKey="agent:ops:x"))
        assert [m["messageId"] for m in history["messages"]] == ["o1", "o2"]
        scoped = await engine.search(SearchParams(query="alpha", sessionKeys=["agent:ops:x"]))
        assert ids(scoped) == ["o1"]
        assert sorted(engine.agent_ids_on_disk()) == ["main", "ops"]
        listed = {s["sessionKey"]: s["label"] for s in (await engine.list_sessions(ListParams(agentId="ops")))["sessions"]}
        assert listed == {"agent:ops:x": "Ops window"}
    env = {**os.environ, "SESSIONSEARCH_DATA_DIR": str(tmp_path / "fresh")}
    run = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "import", str(state)], capture_output=True,
                         text=True, env=env, timeout=60)
    assert f"note: {sessions / 'sessions.json'}: entry 'agent:ops:x' names agent ops; stored under that agent\n" \
        in run.stdout, run.stdout


def test_transcripts_that_are_not_regular_files_inside_the_state_dir_are_reported_and_skipped(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text(_line("x1", "alpha secret") + "\n")
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    (sessions / "sessions.json").write_text(json.dumps({
        "agent:main:good": {"sessionId": "good-1"},
        "agent:main:folder": {"sessionId": "folder-1"},
        "agent:main:link": {"sessionId": "link-1"},
        "agent:main:loop": {"sessionId": "loop-1"},
        "agent:main:pipe": {"sessionId": "pipe-1"},
    }))
    (sessions / "good-1.jsonl").write_text(_line("g1", "alpha good") + "\n")
    (sessions / "folder-1.jsonl").mkdir()
    (sessions / "stray-folder.jsonl").mkdir()
    (sessions / "link-1.jsonl").symlink_to(outside / "secret.jsonl")
    (sessions / "stray-link.jsonl").symlink_to(Path("..") / ".." / ".." / ".." / "outside" / "secret.jsonl")
    (sessions / "loop-1.jsonl").symlink_to(sessions / "loop-1.jsonl")
    os.mkfifo(sessions / "pipe-1.jsonl")  # opening it would wait for a writer forever
    (sessions / "inside-1.jsonl").symlink_to(sessions / "good-1.jsonl")  # inside the state dir: imported
    run, report = _cli_import(str(state), data=tmp_path / "data")
    assert run.returncode == 0, run.stderr
    print(report["problems"])
    assert _where(report) == {(name, None) for name in (
        "folder-1.jsonl", "stray-folder.jsonl", "link-1.jsonl", "stray-link.jsonl", "loop-1.jsonl", "pipe-1.jsonl")}
    assert sorted(f["session_key"] for f in report["files"]) == ["agent:main:good", "agent:main:imported:inside-1"]
    again, second = _cli_import(str(state), data=tmp_path / "data")
    assert again.returncode == 0 and second["events"] == 0 and _where(second) == _where(report)
    assert asyncio.run(_ids_found(tmp_path / "data", "alpha")) == ["g1", "g1"]


async def test_a_sessions_json_that_is_not_a_map_of_entries_is_reported_and_its_transcripts_still_imported(tmp_path):
    state = tmp_path / "state"
    listing = {
        "alist": "[]",
        "deep": "[" * 100_000 + "]" * 100_000,
        "badutf": b'{"agent:badutf:k": {"sessionId": "s-1"}}\xff'.decode("latin-1"),
        "entries": json.dumps({"agent:entries:a": "s-1", "agent:entries:b": {"sessionId": 7},
                               "agent:entries:c": {"sessionId": ""}, "agent:entries:d": {"sessionId": None},
                               "agent:entries:e": {"sessionId": "s-1", "label": {"x": 1}, "updatedAt": 1e400}}),
    }
    for agent, text in listing.items():
        sessions = _sessions_dir(state, agent)
        (sessions / "sessions.json").write_bytes(text.encode("latin-1"))
        (sessions / "s-1.jsonl").write_text(_line(f"{agent}1", "alpha") + "\n")
    (state / "agents" / "dirjson" / "sessions" / "sessions.json").mkdir(parents=True)
    (state / "agents" / "dirjson" / "sessions" / "s-1.jsonl").write_text(_line("dirjson1", "alpha") + "\n")
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, state)
        problems = [(Path(p.file).parent.parent.name, p.line, p.message) for p in report.problems]
        print(problems)
        by_agent: dict[str, list[str]] = {}
        for agent, line, message in problems:
            assert line is None
            by_agent.setdefault(agent, []).append(message)
        assert sorted(by_agent) == ["alist", "badutf", "deep", "dirjson", "entries"]
        assert by_agent["alist"] == ["unreadable: must map session keys to entries"]
        assert by_agent["deep"] == ["unreadable: nested too deeply"]
        assert by_agent["badutf"][0].startswith("unreadable: not UTF-8")
        assert by_agent["dirjson"] == ["unreadable: not a regular file"]
        assert sorted(by_agent["entries"]) == [
            "entry 'agent:entries:a' is not an object; skipped",
            "entry 'agent:entries:b': sessionId must be a non-empty string; skipped",
            "entry 'agent:entries:c': sessionId must be a non-empty string; skipped",
            "entry 'agent:entries:d' has no sessionId; skipped",
            "entry 'agent:entries:e': label must be a string; ignored",
            "entry 'agent:entries:e': updatedAt must be epoch milliseconds; ignored",
        ]
        assert report.events == 5
        assert sorted(f.session_key for f in report.files) == [
            "agent:alist:imported:s-1", "agent:badutf:imported:s-1", "agent:deep:imported:s-1",
            "agent:dirjson:imported:s-1", "agent:entries:e"]


async def test_a_line_of_invalid_utf8_or_over_the_size_limit_is_reported_and_the_rest_of_the_file_kept(
        tmp_path, monkeypatch):
    monkeypatch.setattr("sessionsearch.importer.MAX_LINE_BYTES", 4096)
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:k": {"sessionId": "k-1"}}))
    with open(sessions / "k-1.jsonl", "wb") as fh:
        fh.write(_line("k1", "alpha one").encode() + b"\n")
        fh.write(_line("k2", "alpha two").encode()[:-3] + b"\xff\xfe\"}}\n")
        fh.write(_line("k3", "alpha big " + "x" * 20_000).encode() + b"\n")
        fh.write(_line("k4", "alpha four", "k1").encode() + b"\n")
        fh.write(b"x" * 50_000)  # an unterminated huge last line
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, state)
        assert [(p.line, p.message) for p in report.problems] == [
            (2, "not UTF-8: invalid start byte at byte 99"), (3, "longer than 4096 bytes; skipped"),
            (5, "longer than 4096 bytes; skipped")]
        assert [(f.lines, f.imported, f.bad) for f in report.files] == [(5, 2, 3)]
        again = await run_import(engine, state)
        assert again.events == 0 and again.problems == []
        await engine.reconcile_pending()
        assert sorted(ids(await engine.search(SearchParams(query="alpha")))) == ["k1", "k4"]


async def test_an_event_the_store_refuses_costs_only_its_own_line(tmp_path, monkeypatch):
    # parse_event now refuses every value the store is known to fail on, so the store's refusal of
    # one row is injected here: the writer's planning step raises for the event with id "refused"
    import sessionsearch.store.sqlite.writer as writer
    real_plan = writer.plan_append

    def refusing_plan(events, **kwargs):
        if any(e.event_id == "refused" for e in events):
            raise ValueError("injected refusal")
        return real_plan(events, **kwargs)

    monkeypatch.setattr(writer, "plan_append", refusing_plan)
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:k": {"sessionId": "k-1", "label": "Kept"}}))
    lines = [_line("r1", "alpha one")] + [_line(f"r{i}", f"alpha {i}", f"r{i - 1}") for i in range(2, 8)]
    lines[3] = _line("refused", "alpha refused", "r3")
    (sessions / "k-1.jsonl").write_text("\n".join(lines) + "\n")
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, state)
        assert [(p.line, p.message) for p in report.problems] == [(4, "not imported: ValueError: injected refusal")]
        assert [(f.lines, f.imported, f.bad) for f in report.files] == [(7, 6, 1)]
        again = await run_import(engine, state)
        assert again.events == 0 and again.problems == []
        await engine.reconcile_pending()
        history = await engine.history(HistoryParams(sessionKey="agent:main:k"))
        assert [m["messageId"] for m in history["messages"]] == ["r1", "r2", "r3", "r5", "r6", "r7"]
        assert (await engine.list_sessions())["sessions"][0]["label"] == "Kept"


async def test_a_window_the_store_refuses_is_reported_once_and_its_lines_wait_for_a_later_import(tmp_path):
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:k": {"sessionId": "k-1"},
                                                        "agent:main:j": {"sessionId": "j-1"}}))
    (sessions / "k-1.jsonl").write_text(_line("k1", "alpha one") + "\n")
    (sessions / "j-1.jsonl").write_text(_line("j1", "alpha j") + "\n")
    async with engine_at(tmp_path / "data") as engine:
        await run_import(engine, state)
        await engine.archive(SessionRef(sessionKey="agent:main:k"))
        with open(sessions / "k-1.jsonl", "a") as fh:
            fh.write(_line("k2", "alpha two", "k1") + "\n")
        with open(sessions / "j-1.jsonl", "a") as fh:
            fh.write(_line("j2", "alpha j two", "j1") + "\n")
        refused = await run_import(engine, state)
        assert [(Path(p.file).name, p.line, p.message) for p in refused.problems] == [
            ("k-1.jsonl", None, "not imported: session 'agent:main:k' is archived; restore it before appending")]
        assert refused.events == 1  # j2
        await engine.restore(SessionRef(sessionKey="agent:main:k"))
        later = await run_import(engine, state)
        assert later.events == 1 and later.problems == []
        await engine.reconcile_pending()
        history = await engine.history(HistoryParams(sessionKey="agent:main:k"))
        assert [m["messageId"] for m in history["messages"]] == ["k1", "k2"]


@pytest.mark.parametrize("cut", ["inside the JSON", "inside a UTF-8 character"])
async def test_an_unterminated_last_line_that_is_not_json_yet_is_left_for_the_next_import(tmp_path, cut):
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:k": {"sessionId": "k-1"}}))
    complete = json.dumps({"type": "message", "id": "k2", "parentId": "k1",
                           "message": {"role": "user", "content": "alpha 東京"}}, ensure_ascii=False).encode()
    at = 30 if cut == "inside the JSON" else complete.index("東".encode()) + 1
    with open(sessions / "k-1.jsonl", "wb") as fh:
        fh.write(_line("k1", "alpha one").encode() + b"\n" + complete[:at])  # the gateway is mid-write
    async with engine_at(tmp_path / "data") as engine:
        first = await run_import(engine, state)
        assert [(p.line, p.message) for p in first.problems] == [
            (2, "incomplete last line (no newline at the end); left for the next import")]
        assert first.events == 1 and first.files[0].lines == 1
        with open(sessions / "k-1.jsonl", "ab") as fh:
            fh.write(complete[at:] + b"\n")
        second = await run_import(engine, state)
        assert second.events == 1 and second.problems == [] and second.files[0].skipped_lines == 1
        await engine.reconcile_pending()
        assert sorted(ids(await engine.search(SearchParams(query="alpha")))) == ["k1", "k2"]


def test_file_names_that_are_not_utf8_are_reported_readably_and_skipped(tmp_path):
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    (sessions / "good-1.jsonl").write_text(_line("g1", "alpha good") + "\n")
    root = os.fsencode(sessions)
    with open(root + b"/bad-\xff.jsonl", "w") as fh:
        fh.write(_line("b1", "alpha bad name") + "\n")
    os.makedirs(os.fsencode(state) + b"/agents/ag\xfe/sessions")
    run, report = _cli_import(str(state), data=tmp_path / "data")
    assert run.returncode == 0, run.stderr
    assert {(Path(p["file"]).name, p["message"]) for p in report["problems"]} == {
        ("sessions.json", "missing; transcripts imported under generated keys"),
        ("bad-\\xff.jsonl", "file name is not UTF-8 text; skipped"),
        ("ag\\xfe", "not a valid agent id; skipped")}
    assert [f["session_key"] for f in report["files"]] == ["agent:main:imported:good-1"]


HANG_S = 30  # only tells "read at once" from "waited on the FIFO for a writer"; the import takes ~1 s


@pytest.mark.parametrize("swap", ["symlink outside", "fifo", "another file"])
async def test_a_transcript_swapped_after_it_was_checked_is_refused_not_followed(tmp_path, monkeypatch, swap):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text(_line("x1", "alpha secret") + "\n")
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:good": {"sessionId": "good-1"},
                                                        "agent:main:swapped": {"sessionId": "swap-1"}}))
    (sessions / "good-1.jsonl").write_text(_line("g1", "alpha good") + "\n")
    target = sessions / "swap-1.jsonl"
    target.write_text(_line("s1", "alpha checked") + "\n")
    real_plan = importer.plan_import

    def plan_then_swap(*args, **kwargs):  # between the checks of the plan and the reading
        plan = real_plan(*args, **kwargs)
        beside = sessions / "swap-1.new"
        if swap == "symlink outside":
            beside.symlink_to(outside / "secret.jsonl")
        elif swap == "fifo":
            os.mkfifo(beside)
        else:
            beside.write_text(_line("r1", "alpha replaced") + "\n")
        os.replace(beside, target)  # made beside and renamed over it: another inode for sure
        return plan

    def give_the_fifo_a_writer() -> None:  # a hung open then sees end of file, and the test ends
        unblocked.set()
        with contextlib.suppress(OSError):
            os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))

    monkeypatch.setattr(importer, "plan_import", plan_then_swap)
    unblocked = threading.Event()
    timer = threading.Timer(HANG_S, give_the_fifo_a_writer)
    timer.start()
    try:
        async with engine_at(tmp_path / "data") as engine:
            report = await run_import(engine, state)
    finally:
        timer.cancel()
    assert not unblocked.is_set(), "the import waited on the FIFO"
    print(swap, [str(p) for p in report.problems])
    assert [(Path(p.file).name, p.line, p.message) for p in report.problems] == [
        ("swap-1.jsonl", None, "unreadable: replaced since the import checked it; skipped")]
    assert [(f.session_id, f.imported) for f in report.files] == [("good-1", 1), ("swap-1", 0)]
    assert await _ids_found(tmp_path / "data", "alpha") == ["g1"]


async def test_a_write_to_postgresql_progresses_while_the_next_chunk_is_parsed(pg, tmp_path, monkeypatch):
    # a chunk's write must start while the next chunk is parsed, not wait until that chunk is sent:
    # the parse and the server's work overlap (on SQLite the writer thread's Python would contend
    # with the parse for the GIL: measured slower, so it does not yield there)
    monkeypatch.setattr(importer, "BATCH_EVENTS", 100)
    monkeypatch.setattr(importer, "YIELD_LINES", 10, raising=False)
    parsed = [0]
    real_parse, real_write = importer._parse_line, importer._Group._write

    def counting_parse(raw, now_ms, migration):
        parsed[0] += 1
        return real_parse(raw, now_ms, migration)

    started: list[int] = []

    async def recording_write(self, store, steps):
        started.append(parsed[0])
        await real_write(self, store, steps)

    monkeypatch.setattr(importer, "_parse_line", counting_parse)
    monkeypatch.setattr(importer._Group, "_write", recording_write)
    state = tmp_path / "state"
    sessions = _sessions_dir(state)
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:k": {"sessionId": "k-1"}}))
    lines = [_line("m0", "alpha 0")] + [_line(f"m{i}", f"alpha {i}", f"m{i - 1}") for i in range(1, 350)]
    (sessions / "k-1.jsonl").write_text("\n".join(lines) + "\n")
    async with engine_at(pg) as engine:
        report = await run_import(engine, state)
        assert report.problems == [] and report.events == 350
        assert started[0] < 150, started  # the first chunk's write began within the second chunk's parse
        await engine.reconcile_pending()
        history = await engine.history(HistoryParams(sessionKey="agent:main:k", limit=500))
        assert [m["messageId"] for m in history["messages"]] == [f"m{i}" for i in range(350)]
