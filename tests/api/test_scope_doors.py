"""`scope` through every door (SPEC §4): HTTP (errors with their texts, a roster paged to its end that
agrees with the search over the same scope), the agent tool, MCP, and the schemas made from the
declaration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sessionsearch.api.openapi import openapi_document
from sessionsearch.search.scope import FIELDS

from ..helpers import chain
from .test_mcp import call, seed, stdio

COMBINED = "scope cannot be combined with agentId or sessionKeys"


def test_scope_errors_and_a_paged_roster_agree_with_the_search_over_http(server):
    keys = [f"agent:main:s{i:02d}" for i in range(12)] + ["agent:ops:o1", "agent:ops:o2"]
    for i, key in enumerate(keys):
        kind = "cron" if i % 3 == 0 else "direct"
        assert server.post("sessions.upsert", {"sessionKey": key, "kind": kind})[0] == 200
        assert server.post("transcript.append", {"sessionKey": key, "events": chain(
            f"m{i}-", [("user", "the quarterly report")])})[0] == 200
    for method in ("sessions.search", "sessions.list"):
        base = {"query": "report"} if method == "sessions.search" else {}
        for body, text in [({"scope": {"x": 1}}, "scope has unknown field 'x'"),
                           ({"scope": {"kinds": ["robot"]}}, "scope.kinds has unknown kind 'robot'"),
                           ({"scope": {"excludeCron": 1}}, "scope.excludeCron must be a boolean"),
                           ({"scope": {}, "agentId": "main"}, COMBINED)]:
            status, got = server.post(method, {**base, **body})
            assert (status, got["error"]["code"], got["error"]["message"]) == (400, "INVALID_REQUEST", text)
    status, got = server.post("sessions.search", {"query": "report", "scope": {}, "sessionKeys": [keys[0]]})
    assert (status, got["error"]["message"]) == (400, COMBINED)
    assert server.post("sessions.list", {"cursor": "not-a-cursor"})[1]["error"]["message"] == "cursor is not valid"

    scope = {"agentIds": ["main", "ops"], "excludeCron": True}
    roster, cursor = [], None
    while True:
        status, page = server.post("sessions.list", {"scope": scope, "limit": 3, **({"cursor": cursor} if cursor else {})})
        assert status == 200
        roster += [s["sessionKey"] for s in page["sessions"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    expected = sorted(k for i, k in enumerate(keys) if i % 3 != 0)
    assert sorted(roster) == expected and len(roster) == len(set(roster))
    status, found = server.post("sessions.search", {"query": "report", "scope": scope, "resultMode": "sessions",
                                                    "limit": 25})
    assert status == 200 and sorted(r["sessionKey"] for r in found["results"]) == expected
    assert sorted(r["sessionKey"] for r in found["sessions"]) == expected
    status, tool = server.post("tools/sessions_search", {"query": "report", "scope": {"agentIds": ["ops"], "excludeCron": True}})
    assert status == 200 and {h["sessionKey"] for h in tool["results"]} == {"agent:ops:o2"}
    assert [r["sessionKey"] for r in tool["sessions"]] == ["agent:ops:o2"]  # o1 (the 12th) is a cron session
    status, tool = server.post("tools/sessions_search", {"query": "report", "scope": {"kinds": ["robot"]}})
    assert status == 200 and tool == {"status": "error", "error": "scope.kinds has unknown kind 'robot'"}


def test_the_schemas_declare_scope_as_a_closed_object():
    document = openapi_document()
    for path in ("/v1/sessions.search", "/v1/sessions.list"):  # the tools answer "the fields of" these
        schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        (scope,) = [s for s in schema["properties"]["scope"]["anyOf"] if s.get("type") == "object"]
        assert scope["additionalProperties"] is False and sorted(scope["properties"]) == sorted(FIELDS)
        assert scope["properties"]["kinds"]["items"]["enum"] == ["direct", "group", "subagent", "cron", "system"]
    listed = document["paths"]["/v1/sessions.list"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "cursor" in listed["properties"]


async def test_the_mcp_tools_take_scope(tmp_path):
    await seed(tmp_path / "data")
    async with stdio(tmp_path) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in ("sessions_search", "sessions_list"):
            assert "scope" in tools[name].input_schema["properties"]
        error, found = await call(client, "sessions_search", {"query": "loan", "scope": {"label": "main CHAT"}})
        assert not error and {h["sessionKey"] for h in found["results"]} == {"agent:main:main"}
        assert [r["label"] for r in found["sessions"]] == ["Main chat"]
        error, listed = await call(client, "sessions_list", {"scope": {"kinds": ["direct"]}, "limit": 1})
        assert not error and [s["sessionKey"] for s in listed["sessions"]] == ["agent:main:main"]
        assert await call(client, "sessions_search", {"query": "loan", "scope": {"nope": True}}) == (
            True, {"status": "error", "error": "scope has unknown field 'nope'"})


def _cli(data: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "sessionsearch.cli", *args, "--data-dir", str(data), "--json"],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


async def test_the_cli_takes_scope_and_pages_the_list_by_cursor(tmp_path):
    await seed(tmp_path / "data")
    scope = json.dumps({"agentIds": ["main"], "kinds": ["direct"]})
    found = _cli(tmp_path / "data", "search", "loan", "--scope", scope)
    assert {h["sessionKey"] for h in found["results"]} == {"agent:main:main"} and len(found["sessions"]) == 1
    keys, cursor = [], None
    while True:
        page = _cli(tmp_path / "data", "list", "--scope", '{"agentIds": ["main"]}', "--limit", "1",
                    *(["--cursor", cursor] if cursor else []))
        keys += [s["sessionKey"] for s in page["sessions"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert sorted(keys) == ["agent:main:main", "agent:main:other", "agent:main:rewound"]  # never the incognito one
