"""Session metadata (SPEC §3) arrives by upsert and by import; both keep the same rules, each says it its own way."""

from __future__ import annotations

import json

from sessionsearch.errors import InvalidRequest
from sessionsearch.importer import run_import
from sessionsearch.protocol import UpsertParams

from ..helpers import engine_at

# every metadata field wrong at once: which problem is named, and in what order, is part of the contract
BAD = {"label": 5, "displayName": "ok", "spawnedBy": "agent:bad id:x", "parentSessionKey": "agent:main:\ud800",
       "kind": "robot", "group": "\udfff", "incognito": "yes"}


async def test_an_upsert_with_several_bad_fields_names_the_first_text_field_then_keys_kind_and_incognito(backend):
    async with engine_at(backend) as engine:
        seen = []
        fields = dict(BAD)
        while True:
            try:
                await engine.upsert_session(UpsertParams.of({"sessionKey": "agent:main:s", **fields}))
                break
            except InvalidRequest as exc:
                seen.append((exc.field, exc.message))
                del fields[exc.field]
        assert seen == [
            ("label", "label must be a string"),
            ("group", "group contains an unpaired surrogate (U+DFFF)"),
            ("spawnedBy", "spawnedBy must be 1..64 letters, digits, '_' or '-'"),
            ("parentSessionKey", "parentSessionKey contains an unpaired surrogate (U+D800)"),
            ("kind", "kind must be one of cron, direct, group, subagent, system"),
            ("incognito", "incognito must be a boolean"),
        ]
        listed = (await engine.list_sessions())["sessions"]
        assert [(s["sessionKey"], s.get("displayName")) for s in listed] == [("agent:main:s", "ok")]


async def test_an_import_reports_every_bad_field_in_entry_order_and_keeps_the_good_ones(backend, tmp_path):
    sessions = tmp_path / "state" / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "sessions.json").write_text(json.dumps({"agent:main:s": {"sessionId": "s-1", **BAD}}))
    async with engine_at(backend) as engine:
        report = await run_import(engine, tmp_path / "state")
        assert [p.message for p in report.problems] == [
            "missing transcript of agent:main:s",
            "entry 'agent:main:s': label must be a string; ignored",
            "entry 'agent:main:s': spawnedBy is not a session key; ignored",
            "entry 'agent:main:s': parentSessionKey is not a session key; ignored",
            "entry 'agent:main:s': unknown kind 'robot'; ignored",
            "entry 'agent:main:s': group must be a string; ignored",
            "entry 'agent:main:s': incognito must be a boolean; ignored",
        ]
        listed = (await engine.list_sessions())["sessions"]
        assert [(s["sessionKey"], s.get("displayName"), s.get("label")) for s in listed] == [("agent:main:s", "ok", None)]

