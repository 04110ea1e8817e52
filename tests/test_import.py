"""Import of the gateway's legacy state dir (SPEC §7): problems reported, valid rows kept, re-runs harmless."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sessionsearch.importer import run_import

from .helpers import engine_at, ids

DEMO = Path(__file__).resolve().parent.parent / "sessionsearch" / "demo_data"


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
        json.dumps({"type": "message", "id": "g2", "parentId": "g1", "message": {"role": "wizard", "content": "x"}}),
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
        assert "entry 'agent:main:broken' has no sessionId" in problems[("sessions.json", None)] or any(
            "agent:main:broken" in m for m in problems.values())
        assert any("missing transcript of agent:main:gone" in m for m in problems.values())
        assert any("unknown kind 'robot'" in m for m in problems.values())
        assert report.events == 5  # header, g1, g3, d1, s1
        await engine.reconcile_pending()
        found = await engine.search(query="alpha", limit=25)
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
        assert len((await engine.search(query="alpha", limit=25))["results"]) == 4


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
        history = await engine.history(sessionKey="agent:main:good")
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
        assert (await engine.search(query="loan"))["indexing"] is True
        await engine.reconcile_pending()
        assert ids(await engine.search(query="abandoned plan")) == []  # rewound away
        assert ids(await engine.search(query="smaller deposit")) == ["car-plans-01-m5"]
        assert ids(await engine.search(query="東京")) and ids(await engine.search(query="北京"))
        assert ids(await engine.search(query="surprise party")) == []  # incognito


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
        ("dm-1.jsonl", None), ("gone-1.jsonl", None), ("sessions.json", None)]
    shutil.rmtree(tmp_path / "data")
    fresh = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "import", str(state), "--json"],
                           capture_output=True, text=True, env=env, timeout=60)
    report = json.loads(fresh.stdout)
    assert report["events"] == 5
    assert sorted((Path(p["file"]).name, p["line"]) for p in report["problems"]) == [
        ("dm-1.jsonl", None), ("gone-1.jsonl", None), ("good-1.jsonl", 3), ("good-1.jsonl", 4),
        ("good-1.jsonl", 5), ("sessions.json", None)]
