"""A sessions.json entry naming another agent that the import refuses makes no database for that
agent: an empty agent would be listed, counted and searched for nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionsearch.importer import run_import

from ..helpers import engine_at

REFUSED = {
    "a sessionId that leaves its dir": {"agent:ops:x": {"sessionId": "../x"}},
    "no sessionId": {"agent:ops:x": {"label": "Ops"}},
    "a sessionId that is no string": {"agent:ops:x": {"sessionId": 7}},
    "a key that is no session key": {"agent:ops!:x": {"sessionId": "s1"}},
    "an entry that is no object": {"agent:ops:x": "s1"},
}


@pytest.mark.parametrize("index", REFUSED.values(), ids=REFUSED.keys())
async def test_a_refused_entry_naming_another_agent_makes_no_database_for_it(tmp_path, index):
    sessions = tmp_path / "state" / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "sessions.json").write_text(json.dumps({**index, "agent:main:home": {"sessionId": "home-1"}}))
    (sessions / "home-1.jsonl").write_text(json.dumps(
        {"type": "message", "id": "h1", "parentId": None, "message": {"role": "user", "content": "home"}}) + "\n")
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, tmp_path / "state")
        assert any("skipped" in p.message for p in report.problems), report.problems
        assert engine.agent_ids_on_disk() == ["main"]
    assert sorted(p.name for p in Path(tmp_path / "data" / "agents").glob("*.db")) == ["main.db"]
