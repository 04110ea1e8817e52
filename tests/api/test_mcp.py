"""The MCP server through the official SDK's own client: stdio (a real `sessionsearch mcp`) and `/mcp`
on a real `sessionsearch serve`, with the operator's and scoped tokens."""

from __future__ import annotations

import json
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from sessionsearch.auth import sha256_hex
from sessionsearch.protocol import AppendParams, UpsertParams
from sessionsearch.search.render import INDEXING_WARNING

from ..helpers import chain, engine_at, leaf, msg
from ..server import Server

MAIN, OTHER, SECRET, REWOUND = "agent:main:main", "agent:main:other", "agent:main:secret", "agent:main:rewound"
OPERATOR_TOKEN, SCOPED_TOKEN = "operator-s3cret", "scoped-s3cret"


async def seed(data_dir: Path) -> None:
    """Three visible sessions (one rewound, so it waits for reconciliation) and an incognito one."""
    async with engine_at(data_dir) as engine:
        await engine.upsert_session(UpsertParams(sessionKey=MAIN, label="Main chat", kind="direct"))
        await engine.append(AppendParams(sessionKey=MAIN, events=chain("m", [("user", "the loan papers arrive friday"),
                                              ("assistant", "noted: loan papers on friday"),
                                              ("user", "and the notary comes monday")]), sessionId="s1"))
        await engine.append(AppendParams(sessionKey=OTHER, events=chain("o", [("user", "other team: loan rates went up")])))
        await engine.upsert_session(UpsertParams(sessionKey=SECRET, incognito=True))
        await engine.append(AppendParams(sessionKey=SECRET, events=[msg("x1", "user", "secret loan", None)]))
        await engine.append(AppendParams(sessionKey=REWOUND, events=chain("r", [("user", "loan draft one"), ("user", "loan draft two")])))
        await engine.append(AppendParams(sessionKey=REWOUND, events=[leaf("l1", "r2", "r1")]))


@asynccontextmanager
async def stdio(tmp_path: Path, *args: str):
    with open(tmp_path / "mcp.log", "w") as errlog:
        params = StdioServerParameters(command=sys.executable, args=[
            "-m", "sessionsearch.cli", "mcp", "--data-dir", str(tmp_path / "data"), *args])
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client
    log = (tmp_path / "mcp.log").read_text()
    assert "Traceback" not in log and "api.tool_failed" not in log, log[-3000:]


@asynccontextmanager
async def http(url: str, token: str, mode: str = "auto"):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as session:
        async with Client(streamable_http_client(f"{url}/mcp", http_client=session), mode=mode) as client:
            yield client


async def call(client: Client, tool: str, arguments: dict) -> tuple[bool, dict]:
    """A tool's answer: whether it is marked an error, and its JSON (the text every client shows a model,
    which the structured content repeats)."""
    result = await client.call_tool(tool, arguments)
    body = json.loads(result.content[0].text)
    assert result.structured_content == body
    return bool(result.is_error), body


async def test_stdio_serves_the_three_tools_as_the_agent_tools_answer(tmp_path):
    await seed(tmp_path / "data")
    async with stdio(tmp_path) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert sorted(tools) == ["sessions_history", "sessions_list", "sessions_search"]
        assert "indexing: true" in tools["sessions_search"].description
        assert "hasOlder" in tools["sessions_history"].description
        assert tools["sessions_search"].input_schema["properties"]["limit"]["maximum"] == 25
        assert not {"oneOf", "allOf", "anyOf"} & set(tools["sessions_search"].input_schema)

        error, found = await call(client, "sessions_search", {"query": "loan"})
        assert not error and found["indexing"] is True and found["warning"] == INDEXING_WARNING
        assert {hit["sessionKey"] for hit in found["results"]} == {MAIN, OTHER}  # the incognito one never

        hit = next(h for h in found["results"] if h["messageId"] == "m1")
        error, around = await call(client, "sessions_history", {"sessionKey": MAIN, "sessionId": hit["sessionId"],
                                                                 "messageId": "m1", "limit": 2})
        assert not error and around["anchorMessageId"] == "m1" and around["hasNewer"] is True
        assert [m["messageId"] for m in around["messages"]] == ["m1", "m2"]

        error, listed = await call(client, "sessions_list", {"search": "main ch"})
        assert not error and [(s["sessionKey"], s["label"]) for s in listed["sessions"]] == [(MAIN, "Main chat")]

        assert await call(client, "sessions_search", {"query": "loan", "limit": 99}) == (
            True, {"status": "error", "error": "limit must be between 1 and 25"})
        assert await call(client, "sessions_history", {"sessionKey": MAIN, "offset": 1, "messageId": "m1"}) == (
            True, {"status": "error", "error": "offset and messageId cannot be used together"})
        assert (await call(client, "sessions_search", {"query": "x", "bogus": 1}))[1] == {
            "status": "error", "error": "unknown field 'bogus'"}
        error, denied = await call(client, "sessions_search", {"query": "loan", "sessionKeys": [SECRET]})
        assert error and denied["status"] == "forbidden" and denied["error"]


async def test_stdio_with_a_requester_answers_as_that_session(tmp_path):
    await seed(tmp_path / "data")
    config = tmp_path / "c.toml"
    config.write_text('[tools.sessions]\nvisibility = "self"\n')
    async with stdio(tmp_path, "--config", str(config), "--requester", MAIN) as client:
        error, found = await call(client, "sessions_search", {"query": "loan"})
        assert not error and {hit["sessionKey"] for hit in found["results"]} == {MAIN}
        error, listed = await call(client, "sessions_list", {})
        assert not error and [s["sessionKey"] for s in listed["sessions"]] == [MAIN]
        error, denied = await call(client, "sessions_history", {"sessionKey": OTHER})
        assert error and denied["status"] == "forbidden"
        error, denied = await call(client, "sessions_search", {"query": "loan", "requester": {"sessionKey": OTHER}})
        assert error and denied == {"status": "forbidden", "error": (
            "this credential acts as requester 'agent:main:main'; the request names 'agent:main:other', which it "
            "may not act as (leave requester out)")}


def start(tmp_path: Path, config: str = "") -> Server:
    path = tmp_path / "c.toml"
    path.write_text(f'[[auth.tokens]]\ntoken_sha256 = "{sha256_hex(SCOPED_TOKEN)}"\nrequester = "{MAIN}"\n' + config)
    return Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_API_TOKEN=OPERATOR_TOKEN,
                  SESSIONSEARCH_CONFIG=str(path))


def stop(srv: Server) -> None:
    assert srv.stop() == 0
    log = srv.log_path.read_text()
    assert "api.crashed" not in log and "api.failed" not in log and "Traceback" not in log, log[-3000:]


def rewind_over_http(srv: Server) -> dict[str, str]:
    """Sessions written through the API after start-up, so that the first search meets the rewound one."""
    auth = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    for key, events in ((MAIN, chain("m", [("user", "the loan papers arrive friday")])),
                        (OTHER, chain("o", [("user", "other team: loan rates went up")])),
                        (REWOUND, chain("r", [("user", "loan draft one"), ("user", "loan draft two")])),
                        (REWOUND, [leaf("l1", "r2", "r1")])):
        assert srv.post("transcript.append", {"sessionKey": key, "events": events}, headers=auth)[0] == 200
    assert srv.post("sessions.upsert", {"sessionKey": SECRET, "incognito": True}, headers=auth)[0] == 200
    return auth


async def test_mcp_over_http_is_stateless_json_behind_the_operator_token(tmp_path):
    srv = start(tmp_path)
    try:
        auth = rewind_over_http(srv)
        async with http(srv.url, OPERATOR_TOKEN) as client:
            assert len((await client.list_tools()).tools) == 3
            error, found = await call(client, "sessions_search", {"query": "loan"})
            assert not error and found["indexing"] is True and found["warning"] == INDEXING_WARNING
            error, history = await call(client, "sessions_history", {"sessionKey": MAIN})
            assert not error and [m["messageId"] for m in history["messages"]] == ["m1"]
            error, listed = await call(client, "sessions_list", {"limit": 1000})
            assert not error and SECRET not in {s["sessionKey"] for s in listed["sessions"]}
            assert (await call(client, "sessions_list", {"limit": 0}))[0] is True
            assert (await call(client, "sessions_search", {"query": "x", "sessionKeys": [SECRET]}))[1]["status"] == (
                "forbidden")
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}}
        status, body = srv.request("POST", "/mcp", initialize, headers={
            **auth, "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"})
        assert status == 200 and body["result"]["serverInfo"]["name"] == "sessionsearch"  # JSON, not an SSE stream
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}  # no session id: any web process answers
        status, body = srv.request("POST", "/mcp", listing, headers={
            **auth, "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"})
        assert status == 200 and len(body["result"]["tools"]) == 3
        status, body = srv.get("/mcp", headers={**auth, "Accept": "text/event-stream"})
        assert status == 405 and "use POST" in body["error"]["message"]  # no stream left open
    finally:
        stop(srv)


async def test_a_scoped_token_acts_as_its_requester_on_the_tools_and_mcp_only(tmp_path):
    srv = start(tmp_path, '\n[tools.sessions]\nvisibility = "self"\n')
    try:
        rewind_over_http(srv)
        scoped = {"Authorization": f"Bearer {SCOPED_TOKEN}"}
        status, body = srv.post("tools/sessions_search", {"query": "loan"}, headers=scoped)
        assert status == 200 and [hit["sessionKey"] for hit in body["results"]] == [MAIN]
        status, body = srv.post("tools/sessions_search", {"query": "loan", "requester": {"sessionKey": OTHER}},
                                headers=scoped)
        assert status == 403 and body["error"]["code"] == "FORBIDDEN"
        assert "acts as requester 'agent:main:main'; the request names 'agent:main:other'" in body["error"]["message"]
        status, body = srv.post("tools/sessions_history", {"sessionKey": MAIN, "requester": {"sessionKey": MAIN}},
                                headers=scoped)
        assert status == 200 and [m["messageId"] for m in body["messages"]] == ["m1"]

        for method, payload in (("transcript.append", {"sessionKey": MAIN, "events": []}),
                                ("sessions.delete", {"sessionKey": OTHER}), ("sessions.search", {"query": "loan"})):
            status, body = srv.post(method, payload, headers=scoped)
            assert status == 403 and "may call only the agent tools (POST /v1/tools/<name>) and /mcp" in (
                body["error"]["message"])
        assert srv.get("/metrics", headers=scoped)[0] == 403

        async with http(srv.url, SCOPED_TOKEN, mode="legacy") as client:
            error, found = await call(client, "sessions_search", {"query": "loan"})
            assert not error and [hit["sessionKey"] for hit in found["results"]] == [MAIN]
            error, denied = await call(client, "sessions_search", {"query": "loan", "requester": {"sessionKey": OTHER}})
            assert error and denied["status"] == "forbidden" and "acts as requester 'agent:main:main'" in denied["error"]
            error, listed = await call(client, "sessions_list", {})
            assert not error and [s["sessionKey"] for s in listed["sessions"]] == [MAIN]

        wrong = {"Authorization": "Bearer wrong"}
        assert srv.post("tools/sessions_search", {"query": "loan"}, headers=wrong)[0] == 401
        assert srv.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=wrong)[0] == 401
        assert srv.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})[0] == 401
        status, _ = srv.post("sessions.delete", {"sessionKey": OTHER}, headers={
            "Authorization": f"Bearer {OPERATOR_TOKEN}"})
        assert status == 200  # the operator token still writes
    finally:
        stop(srv)
