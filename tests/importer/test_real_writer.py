"""Transcripts written by the agent runtime's own SessionManager (tests/node-pi, `make install`),
imported and checked against the file's own active branch as the runtime computes it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from sessionsearch.importer import run_import
from sessionsearch.protocol import HistoryParams, SearchParams

from ..helpers import engine_at, ids, sql_rows

NODE_PI = Path(__file__).resolve().parents[1] / "node-pi"
WRITER = NODE_PI / "write_session.mjs"
WORD = re.compile(r"\bw\d+zz\b")  # each message's own word


def _runtime(program: dict[str, Any]) -> dict[str, Any]:
    """Run the runtime's SessionManager on `program` (write_session.mjs says how)."""
    assert (NODE_PI / "node_modules" / "@mariozechner" / "pi-coding-agent").is_dir(), "run `make install`"
    run = subprocess.run(["node", str(WRITER)], input=json.dumps(program), capture_output=True, text=True,
                         cwd=NODE_PI, timeout=120)
    assert run.returncode == 0, run.stderr
    out: dict[str, Any] = json.loads(run.stdout)
    return out


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def _msg(role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1767323045000, **extra}


STEPS: list[dict[str, Any]] = [
    {"op": "appendMessage", "args": [{"role": "user", "content": "w1zz question", "timestamp": 1767323045000}],
     "as": "u1"},
    {"op": "appendMessage", "args": [{**_msg("assistant", "w2zz answer"), "content": [
        {"type": "thinking", "thinking": "w90zz reasoning"}, {"type": "text", "text": "w2zz answer"},
        {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "w91zz"}}],
        "stopReason": "toolUse", "api": "x", "provider": "x", "model": "x"}], "as": "a1"},
    {"op": "appendMessage", "args": [_msg("toolResult", "w3zz tool output", toolCallId="c1", toolName="bash",
                                          isError=False)]},
    {"op": "appendMessage", "args": [{"role": "bashExecution", "command": "ls", "output": "w4zz", "exitCode": 0,
                                      "cancelled": False, "truncated": False, "timestamp": 1767323046000}]},
    {"op": "appendCompaction", "args": ["summary w5zz", {"ref": "u1"}, 1234]},
    {"op": "appendMessage", "args": [_msg("user", "w6zz after the compaction")], "as": "u2"},
    {"op": "appendMessage", "args": [_msg("assistant", "w7zz first reply")], "as": "a2"},
    {"op": "branch", "args": [{"ref": "u2"}]},
    {"op": "appendMessage", "args": [_msg("assistant", "w8zz second reply")], "as": "a3"},
    {"op": "appendLabelChange", "args": [{"ref": "a3"}, "kept"]},
    {"op": "appendCustomEntry", "args": ["ext", {"w92zz": 1}]},
    {"op": "appendCustomMessageEntry", "args": ["ext", "w93zz custom message", True]},
    {"op": "branchWithSummary", "args": [{"ref": "u2"}, "w94zz what the abandoned path did"]},
    {"op": "appendMessage", "args": [_msg("user", "w9zz on the new path")]},
    {"op": "appendMessage", "args": [_msg("assistant", "w10zz its answer")]},
    {"op": "appendSessionInfo", "args": ["  Written by the runtime  "]},
    {"op": "appendMessage", "args": [{"role": "custom", "customType": "note", "content": "w95zz", "display": True,
                                      "timestamp": 1767323047000}]},
]


async def test_a_session_the_runtime_wrote_answers_search_and_history_from_its_own_active_branch(tmp_path, backend):
    written = _runtime({"dir": str(tmp_path / "pi"), "steps": STEPS})
    sid = written["sessionId"]
    sessions = tmp_path / "state" / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    shutil.copy(written["file"], sessions / f"{sid}.jsonl")
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:pi": {"sessionId": sid}}))
    branch = [e for e in written["branch"] if e["type"] == "message"]
    off = [e for e in written["entries"] if e["type"] == "message" and e not in branch]
    assert len(branch) == 8 and len(off) == 2  # the runtime's own view, which ours must equal
    async with engine_at(backend) as engine:
        report = await run_import(engine, tmp_path / "state")
        assert report.problems == [] and report.notes == []
        assert report.events == len(written["entries"]) + 1  # with the header
        await engine.reconcile_pending()
        for entry in branch + off:
            for word in WORD.findall(_text(entry["message"])):
                indexed = entry in branch and entry["message"]["role"] in ("user", "assistant")
                assert ids(await engine.search(SearchParams(query=word))) == ([entry["id"]] if indexed else []), word
        for word in ("w90zz", "w91zz", "w92zz", "w93zz", "w94zz", "w95zz"):  # never indexed
            assert ids(await engine.search(SearchParams(query=word))) == [], word
        history = await engine.history(HistoryParams(sessionKey="agent:main:pi", includeTools=True))
        assert [(m["messageId"], m["role"]) for m in history["messages"]] == [
            (e["id"], e["message"]["role"]) for e in branch]
        plain = await engine.history(HistoryParams(sessionKey="agent:main:pi"))
        assert [m["messageId"] for m in plain["messages"]] == [
            e["id"] for e in branch if e["message"]["role"] != "toolResult"]
        (listed,) = (await engine.list_sessions())["sessions"]
        assert listed["displayName"] == written["name"] == "Written by the runtime"


def _v1_file(path: Path, sid: str) -> None:
    rows: list[dict[str, Any]] = [
        {"type": "session", "id": sid, "timestamp": "2025-06-01T10:00:00.000Z", "cwd": "/work"},
        {"type": "message", "timestamp": "2025-06-01T10:00:01.000Z", "message": _msg("user", "w1zz old question")},
        {"type": "message", "timestamp": "2025-06-01T10:00:02.000Z", "message": _msg("assistant", "w2zz old answer")},
        {"type": "thinking_level_change", "timestamp": "2025-06-01T10:00:03.000Z", "thinkingLevel": "high"},
        {"type": "message", "timestamp": "2025-06-01T10:00:04.000Z",
         "message": {"role": "bashExecution", "command": "ls", "output": "w3zz", "exitCode": 0, "cancelled": False,
                     "truncated": False, "timestamp": 1748772004000}},
        {"type": "message", "timestamp": "2025-06-01T10:00:05.000Z",
         "message": {"role": "hookMessage", "customType": "h", "content": "w4zz", "display": True,
                     "timestamp": 1748772005000}},
        {"type": "compaction", "timestamp": "2025-06-01T10:00:06.000Z", "summary": "w5zz",
         "firstKeptEntryIndex": 2, "tokensBefore": 900},
        {"type": "model_change", "timestamp": "2025-06-01T10:00:07.000Z", "provider": "p", "modelId": "m"},
        {"type": "message", "timestamp": "2025-06-01T10:00:08.000Z", "message": _msg("user", "w6zz later")},
        {"type": "message", "timestamp": "2025-06-01T10:00:09.000Z", "message": _msg("assistant", "w7zz later too")},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


async def test_a_version_1_file_imports_as_the_runtime_migrates_it_with_stable_ids_in_place_of_random_ones(
        tmp_path, backend):
    sid = "0b7e8f7a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
    sessions = tmp_path / "state" / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:old": {"sessionId": sid}}))
    _v1_file(sessions / f"{sid}.jsonl", sid)
    (tmp_path / "pi").mkdir()
    shutil.copy(sessions / f"{sid}.jsonl", tmp_path / "pi" / f"{sid}.jsonl")
    migrated = _runtime({"open": str(tmp_path / "pi" / f"{sid}.jsonl")})  # the runtime rewrites it in place
    on_disk = [json.loads(line) for line in (tmp_path / "pi" / f"{sid}.jsonl").read_text().splitlines()]
    assert on_disk[1:] == migrated["entries"]
    # the runtime's random ids, position by position, are ours made from the window and the position
    ours = {e["id"]: f"{sid}:{i}" for i, e in enumerate(on_disk) if i}
    assert len(set(ours)) == len(on_disk) - 1 and all(re.fullmatch(r"[0-9a-f]{8}", r) for r in ours)

    def renamed(entry: dict[str, Any]) -> dict[str, Any]:
        return {k: ours.get(v, v) if k in ("id", "parentId", "firstKeptEntryId") else v for k, v in entry.items()}

    for where in (backend, tmp_path / "data-again"):  # two imports, as on two machines: the same ids
        async with engine_at(where) as engine:
            report = await run_import(engine, tmp_path / "state")
            assert report.problems == [] and report.notes == []
            store = await engine.store("main")
            rows = await sql_rows(store, "SELECT body FROM events ORDER BY id",
                                  "SELECT body FROM ss_events ORDER BY id")
            stored = [json.loads(r[0]) if isinstance(r[0], str) else r[0] for r in rows]
            assert stored == [renamed(e) for e in on_disk]
            await engine.reconcile_pending()
            branch = [renamed(e) for e in migrated["branch"] if e["type"] == "message"]
            history = await engine.history(HistoryParams(sessionKey="agent:main:old", includeTools=True))
            assert [(m["messageId"], m["role"]) for m in history["messages"]] == [
                (e["id"], e["message"]["role"]) for e in branch]
            assert [m["role"] for m in history["messages"]] == ["user", "assistant", "bashExecution", "custom",
                                                                 "user", "assistant"]
            for entry in branch:
                indexed = entry["message"]["role"] in ("user", "assistant")
                for word in WORD.findall(_text(entry["message"]) + " " + entry["message"].get("output", "")):
                    assert ids(await engine.search(SearchParams(query=word))) == ([entry["id"]] if indexed else []), word
