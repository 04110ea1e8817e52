"""sessions.json in an import (SPEC §7): entries that share or cross windows lose nothing, and the
file is read with a bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sessionsearch.importer import run_import
from sessionsearch.protocol import SearchParams

from ..helpers import engine_at, ids


def _sessions_dir(root: Path, agent: str) -> Path:
    sessions = root / "agents" / agent / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    return sessions


def _transcript(path: Path, mid: str, text: str) -> None:
    path.write_text(json.dumps({"type": "message", "id": mid, "parentId": None,
                                "message": {"role": "user", "content": text}}) + "\n")


async def test_an_entry_naming_another_agent_leaves_that_agents_own_window_to_its_own_file(tmp_path):
    state = tmp_path / "state"
    main, work = _sessions_dir(state, "main"), _sessions_dir(state, "work")
    # main's index names a session of agent work under sessionId s1, which work's own dir has too
    (main / "sessions.json").write_text(json.dumps({"agent:work:from-main": {"sessionId": "s1", "label": "From main"}}))
    _transcript(main / "s1.jsonl", "m1", "puffin in main's file")
    (work / "sessions.json").write_text(json.dumps({"agent:work:own": {"sessionId": "s1", "label": "Own"}}))
    _transcript(work / "s1.jsonl", "w1", "puffin in work's file")
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, state)
        await engine.reconcile_pending()
        hits = {h["messageId"]: h["sessionKey"] for h in (await engine.search(SearchParams(query="puffin", limit=10)))["results"]}
        assert hits == {"w1": "agent:work:own", "m1": "agent:main:imported:s1"}
        listed = {s["sessionKey"]: s for s in (await engine.list_sessions())["sessions"]}
        assert listed["agent:work:own"]["label"] == "Own" and listed["agent:work:own"]["sessionId"] == "s1"
        assert listed["agent:work:from-main"]["label"] == "From main"  # its metadata kept
        (problem,) = [p for p in report.problems if "from-main" in p.message]
        assert "agent:main:imported:s1" in problem.message and "import again" in problem.message


async def test_a_second_key_sharing_a_session_id_keeps_its_metadata(tmp_path):
    state = tmp_path / "state"
    main = _sessions_dir(state, "main")
    (main / "sessions.json").write_text(json.dumps({
        "agent:main:first": {"sessionId": "s1", "label": "First"},
        "agent:main:second": {"sessionId": "s1", "label": "Second", "kind": "group"},
        "main": {"sessionId": "s2", "label": "Main"},
        "agent:main:main": {"sessionId": "s2", "displayName": "The main one"},
    }))
    _transcript(main / "s1.jsonl", "a1", "grebe")
    _transcript(main / "s2.jsonl", "b1", "grebe main")
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, state)
        await engine.reconcile_pending()
        listed = {s["sessionKey"]: s for s in (await engine.list_sessions())["sessions"]}
        assert (listed["agent:main:first"]["label"], listed["agent:main:first"]["sessionId"]) == ("First", "s1")
        assert (listed["agent:main:second"]["label"], listed["agent:main:second"]["kind"]) == ("Second", "group")
        # the same key written two ways: one session, the fields of both
        assert (listed["agent:main:main"]["label"], listed["agent:main:main"]["displayName"]) == ("Main",
                                                                                                   "The main one")
        assert sorted(ids(await engine.search(SearchParams(query="grebe")))) == ["a1", "b1"]
        (problem,) = [p for p in report.problems if "'agent:main:second'" in p.message]
        assert "already the window of 'agent:main:first'" in problem.message and "import again" in problem.message


def _import_peak_kib(state: Path, data: Path, **env: str) -> tuple[dict, int]:
    """Run the import command in a child process; its JSON report and its peak resident memory."""
    run = subprocess.run([sys.executable, "-c", (
        "import resource, subprocess, sys\n"
        "run = subprocess.run([sys.executable, '-m', 'sessionsearch.cli', 'import', '--json', sys.argv[1]],"
        " capture_output=True, text=True)\n"
        "sys.stdout.write(run.stdout); sys.stderr.write(run.stderr)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(run.returncode)"), str(state)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "SESSIONSEARCH_DATA_DIR": str(data), **env})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout), int(run.stderr.strip().splitlines()[-1])


def test_a_sparse_1_gb_sessions_json_is_refused_unread_with_what_to_do(tmp_path):
    state = tmp_path / "state"
    main = _sessions_dir(state, "main")
    with open(main / "sessions.json", "wb") as fh:
        fh.truncate(1 << 30)  # sparse: no disk, but a whole read would take 1 GiB of memory
    _transcript(main / "s1.jsonl", "a1", "shag")
    report, peak_kib = _import_peak_kib(state, tmp_path / "data")
    (problem,) = report["problems"]
    assert problem["file"].endswith("sessions.json")
    assert "1,073,741,824 bytes" in problem["message"] and "import_index_max_mib" in problem["message"]
    assert "above 1024" in problem["message"] and "none of its transcripts was imported" in problem["message"]
    assert report["files"] == []  # its transcripts wait for their keys rather than take generated ones
    assert peak_kib < 400 * 1024, peak_kib


def test_a_sessions_json_within_a_raised_limit_is_read(tmp_path):
    state = tmp_path / "state"
    main = _sessions_dir(state, "main")
    entries = {"agent:main:k": {"sessionId": "s1", "label": "x" * 100}}
    (main / "sessions.json").write_text(json.dumps(entries) + " " * (2 << 20))  # just over 2 MiB
    _transcript(main / "s1.jsonl", "a1", "shag")
    refused, _ = _import_peak_kib(state, tmp_path / "d1", SESSIONSEARCH_IMPORT_INDEX_MAX_MIB="2")
    assert [p["message"][:8] for p in refused["problems"]] == ["not read"]
    read, _ = _import_peak_kib(state, tmp_path / "d2", SESSIONSEARCH_IMPORT_INDEX_MAX_MIB="3")
    assert read["problems"] == [] and [f["session_key"] for f in read["files"]] == ["agent:main:k"]
