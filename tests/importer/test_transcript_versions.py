"""Transcripts as the agent runtime writes them (SPEC §2): versions 1-3, every role, side files,
session names, BOMs and line ends, read by an import as the runtime reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sessionsearch.importer import run_import
from sessionsearch.protocol import HistoryParams, SearchParams

from ..helpers import engine_at, ids, sql_rows

V1_ID = "v1-window"


def _sessions_dir(root: Path, agent: str = "main") -> Path:
    sessions = root / "agents" / agent / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / "sessions.json").write_text("{}")  # no entries: every transcript under a generated key
    return sessions


def _jsonl(rows: list[Any], end: str = "\n") -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + end for r in rows)


def _v1_rows() -> list[dict[str, Any]]:
    """A Version 1 file as the runtime wrote it: no ids, no parents, a compaction by index."""
    def msg(role: str, content: Any, **extra: Any) -> dict[str, Any]:
        return {"type": "message", "timestamp": "2026-01-02T03:04:05Z",
                "message": {"role": role, "content": content, "timestamp": 1767323045000, **extra}}

    return [
        {"type": "session", "id": V1_ID, "timestamp": "2026-01-02T03:04:05Z", "cwd": "/tmp"},  # 0
        msg("user", "walrus question"),  # 1
        msg("assistant", [{"type": "text", "text": "walrus answer"}]),  # 2
        {"type": "message", "message": {"role": "bashExecution", "command": "ls", "output": "a b", "exitCode": 0,
                                        "timestamp": 1767323046000}},  # 3
        msg("hookMessage", "from a hook", customType="note", display=True),  # 4
        {"type": "compaction", "timestamp": "2026-01-02T03:05:00Z", "summary": "so far", "firstKeptEntryIndex": 2,
         "tokensBefore": 100},  # 5
        {**msg("user", "narwhal after the compaction"), "timestamp": "2026-01-02T03:05:02Z"},  # 6
    ]


async def _bodies(engine: Any, agent: str = "main") -> list[dict[str, Any]]:
    store = await engine.store(agent)
    rows = await sql_rows(store, "SELECT body FROM events ORDER BY id", "SELECT body FROM ss_events ORDER BY id")
    return [json.loads(r[0]) if isinstance(r[0], str) else r[0] for r in rows]


async def test_a_version_1_file_gets_stable_ids_parents_and_its_kept_entry_as_the_runtime_migrates_it(tmp_path):
    sessions = _sessions_dir(tmp_path / "state")
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:old": {"sessionId": V1_ID}}))
    (sessions / f"{V1_ID}.jsonl").write_text(_jsonl(_v1_rows()))
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, tmp_path / "state")
        assert report.problems == [] and report.notes == [] and report.events == 7
        await engine.reconcile_pending()
        assert sorted(ids(await engine.search(SearchParams(query="walrus")))) == [f"{V1_ID}:1", f"{V1_ID}:2"]
        assert ids(await engine.search(SearchParams(query="narwhal"))) == [f"{V1_ID}:6"]
        history = await engine.history(HistoryParams(sessionKey="agent:main:old", includeTools=True))
        assert [(m["messageId"], m["role"]) for m in history["messages"]] == [
            (f"{V1_ID}:1", "user"), (f"{V1_ID}:2", "assistant"), (f"{V1_ID}:3", "bashExecution"),
            (f"{V1_ID}:4", "custom"), (f"{V1_ID}:6", "user")]
        bodies = await _bodies(engine)
        assert bodies[0]["version"] == 3
        assert [(b.get("id"), b.get("parentId")) for b in bodies[1:]] == [
            (f"{V1_ID}:{i}", f"{V1_ID}:{i - 1}" if i > 1 else None) for i in range(1, 7)]
        compaction = bodies[5]
        assert compaction["firstKeptEntryId"] == f"{V1_ID}:2" and "firstKeptEntryIndex" not in compaction
        # the event's time, not the message's: the runtime's files differ by seconds
        assert [h["timestamp"] for h in (await engine.search(SearchParams(query="narwhal")))["results"]] == [1767323102000]
    async with engine_at(tmp_path / "elsewhere") as again:  # another machine: the same ids
        await run_import(again, tmp_path / "state")
        await again.reconcile_pending()
        assert sorted(ids(await again.search(SearchParams(query="walrus")))) == [f"{V1_ID}:1", f"{V1_ID}:2"]


async def test_version_1_positions_skip_blank_and_malformed_lines_and_a_reimport_of_a_grown_file_keeps_them(tmp_path):
    sessions = _sessions_dir(tmp_path / "state")
    rows: list[Any] = _v1_rows()[:3]
    rows.insert(2, "{broken")
    (sessions / f"{V1_ID}.jsonl").write_text(_jsonl(rows).replace("\n", "\n\n", 1))
    async with engine_at(tmp_path / "data") as engine:
        first = await run_import(engine, tmp_path / "state")
        assert [p.message[:8] for p in first.problems] == ["not JSON"]
        with open(sessions / f"{V1_ID}.jsonl", "a") as fh:
            fh.write(json.dumps({"type": "message", "message": {"role": "user", "content": "walrus later"}}) + "\n")
        second = await run_import(engine, tmp_path / "state")
        assert second.events == 1
        await engine.reconcile_pending()
        history = await engine.history(HistoryParams(sessionKey=f"agent:main:imported:{V1_ID}"))
        # entries as the runtime counts them: the header 0, the two messages 1 and 2, the appended one 3
        assert [m["messageId"] for m in history["messages"]] == [f"{V1_ID}:1", f"{V1_ID}:2", f"{V1_ID}:3"]


async def test_a_version_2_file_keeps_its_ids_and_its_hook_messages_become_custom(tmp_path):
    sessions = _sessions_dir(tmp_path / "state")
    (sessions / "v2.jsonl").write_text(_jsonl([
        {"type": "session", "version": 2, "id": "v2"},
        {"type": "message", "id": "a1", "parentId": None, "message": {"role": "user", "content": "otter"}},
        {"type": "message", "id": "a2", "parentId": "a1", "message": {"role": "hookMessage", "content": "hook"}},
    ]))
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, tmp_path / "state")
        assert report.problems == [] and report.notes == []
        await engine.reconcile_pending()
        history = await engine.history(HistoryParams(sessionKey="agent:main:imported:v2", includeTools=True))
        assert [(m["messageId"], m["role"]) for m in history["messages"]] == [("a1", "user"), ("a2", "custom")]


async def test_every_role_is_carried_and_an_unknown_one_with_a_note(tmp_path):
    sessions = _sessions_dir(tmp_path / "state")
    roles = ["user", "assistant", "toolResult", "system", "bashExecution", "custom", "branchSummary",
             "compactionSummary", "hookMessage", "robot", "robot"]
    rows: list[Any] = [{"type": "session", "version": 3, "id": "all"}]
    for i, role in enumerate(roles):
        rows.append({"type": "message", "id": f"r{i}", "parentId": f"r{i - 1}" if i else None,
                     "message": {"role": role, "content": [{"type": "text", "text": f"beaver {role}"}]}})
    (sessions / "all.jsonl").write_text(_jsonl(rows))
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, tmp_path / "state")
        assert report.problems == [] and report.events == len(rows)
        notes = sorted(n.message for n in report.notes)
        assert len(notes) == 2 and "'hookMessage'" in notes[0] and "'robot'" in notes[1] and "(2 lines)" in notes[1]
        assert {n.line for n in report.notes} == {10, 11}
        await engine.reconcile_pending()
        assert sorted(ids(await engine.search(SearchParams(query="beaver")))) == ["r0", "r1"]  # only user and assistant text
        history = await engine.history(HistoryParams(sessionKey="agent:main:imported:all", includeTools=True))
        assert [m["role"] for m in history["messages"]] == roles


async def test_trajectory_and_checkpoint_files_are_skipped_with_a_note(tmp_path):
    sessions = _sessions_dir(tmp_path / "state")
    line = _jsonl([{"type": "message", "id": "x", "parentId": None, "message": {"role": "user", "content": "heron"}}])
    (sessions / "w1.jsonl").write_text(line)
    (sessions / "w1.trajectory.jsonl").write_text(line)
    (sessions / "w1.checkpoint.0f8b3c1e-2a4d-4e6f-9a1b-3c5d7e9f1a2b.jsonl").write_text(line)
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, tmp_path / "state")
        assert [f.session_id for f in report.files] == ["w1"] and report.problems == []
        assert sorted(Path(n.file).name for n in report.notes) == [
            "w1.checkpoint.0f8b3c1e-2a4d-4e6f-9a1b-3c5d7e9f1a2b.jsonl", "w1.trajectory.jsonl"]
        assert all("not a session window" in n.message for n in report.notes)
        listed = [s["sessionKey"] for s in (await engine.list_sessions())["sessions"]]
        assert listed == ["agent:main:imported:w1"]


async def test_a_session_info_name_is_the_display_name_unless_sessions_json_gives_one(tmp_path):
    sessions = _sessions_dir(tmp_path / "state")
    (sessions / "sessions.json").write_text(json.dumps({
        "agent:main:named": {"sessionId": "n1"}, "agent:main:given": {"sessionId": "n2", "displayName": "Given"}}))
    for sid in ("n1", "n2"):
        (sessions / f"{sid}.jsonl").write_text(_jsonl([
            {"type": "session", "version": 3, "id": sid},
            {"type": "session_info", "id": "i1", "parentId": None, "name": "  First name "},
            {"type": "session_info", "id": "i2", "parentId": "i1", "name": "Latest name"},
        ]))
    async with engine_at(tmp_path / "data") as engine:
        await run_import(engine, tmp_path / "state")
        listed = {s["sessionKey"]: s["displayName"] for s in (await engine.list_sessions())["sessions"]}
        assert listed == {"agent:main:named": "Latest name", "agent:main:given": "Given"}


async def test_a_bom_and_crlf_or_cr_line_ends_are_read(tmp_path):
    sessions = _sessions_dir(tmp_path / "state")
    for sid, end in (("crlf", "\r\n"), ("cr", "\r"), ("lf", "\n")):
        rows = [{"type": "session", "version": 3, "id": sid},
                {"type": "message", "id": f"{sid}1", "parentId": None, "message": {"role": "user", "content": "ibis"}},
                {"type": "message", "id": f"{sid}2", "parentId": f"{sid}1",
                 "message": {"role": "assistant", "content": "ibis too"}}]
        (sessions / f"{sid}.jsonl").write_bytes(b"\xef\xbb\xbf" + _jsonl(rows, end).encode())
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, tmp_path / "state")
        assert report.problems == [] and report.events == 9
        assert {f.session_id: f.lines for f in report.files} == {"crlf": 3, "cr": 3, "lf": 3}
        again = await run_import(engine, tmp_path / "state")  # every line counted as read
        assert again.events == 0 and again.problems == []
        await engine.reconcile_pending()
        assert sorted(ids(await engine.search(SearchParams(query="ibis", limit=10)))) == [
            "cr1", "cr2", "crlf1", "crlf2", "lf1", "lf2"]


async def test_a_cr_at_a_read_boundary_and_an_unfinished_cr_line_are_one_line_end_each(tmp_path, monkeypatch):
    from sessionsearch import importer

    monkeypatch.setattr(importer, "READ_BYTES", 7)  # every line end falls across reads somewhere
    sessions = _sessions_dir(tmp_path / "state")
    rows = [{"type": "message", "id": f"k{i}", "parentId": f"k{i - 1}" if i else None,
             "message": {"role": "user", "content": f"kite {i}"}} for i in range(5)]
    (sessions / "w.jsonl").write_text(_jsonl(rows, "\r\n") + '{"type": "mess')
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, tmp_path / "state")
        assert report.events == 5 and report.files[0].lines == 5
        assert [p.message.split(";")[0] for p in report.problems] == ["incomplete last line (no newline at the end)"]
