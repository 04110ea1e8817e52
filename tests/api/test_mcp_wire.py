"""MCP messages the SDK mishandled, answered as JSON-RPC 2.0 says, on `/mcp` and on stdio
(api/mcp_wire.py); and no per-request log line from the SDK."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sessionsearch.api.mcp_wire import screen

from ..server import Server

ACCEPT = {"Accept": "application/json, text/event-stream"}
LONG = "x" * 10_000


def _rpc(code: int, message: str, request_id=None, **extra) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message, **extra}}


CASES = [
    (b"not json", 400, -32700),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping"', 400, -32700),
    (b"\xff\xfe{}", 400, -32700),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', 400, -32600),
    (b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', 400, -32600),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}', 400, -32600),
    (b'{"jsonrpc":"2.0","id":[1],"method":"tools/list"}', 400, -32600),
    (b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}', 400, -32600),
]


@pytest.mark.parametrize("raw, status, code", CASES)
def test_a_message_json_rpc_refuses_gets_its_error(raw, status, code):
    refusal = screen(raw)
    assert refusal is not None and refusal.status == status
    assert refusal.body["error"]["code"] == code and refusal.body["id"] is None


def test_a_request_with_a_long_method_name_gets_method_not_found_with_the_name_cut():
    refusal = screen(json.dumps({"jsonrpc": "2.0", "id": 7, "method": LONG}))
    assert refusal is not None and refusal.body == _rpc(-32601, "Method not found", 7, data="x" * 200 + "…")


def test_valid_messages_go_on_to_the_sdk():
    for message in ({"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": "a", "method": "x"},
                    {"jsonrpc": "2.0", "method": "notifications/initialized"}):
        assert screen(json.dumps(message)) is None


def test_mcp_over_http_answers_refused_messages_in_json_rpcs_shape_and_logs_no_line_per_request(tmp_path):
    srv = Server(tmp_path / "data", tmp_path / "server.log")
    try:
        for raw, status, code in CASES:
            got, body = srv.request("POST", "/mcp", raw=raw, headers=ACCEPT)
            assert (got, body["error"]["code"], body["id"]) == (status, code, None), raw
        got, body = srv.request("POST", "/mcp", body={"jsonrpc": "2.0", "id": 3, "method": LONG}, headers=ACCEPT)
        assert (got, body) == (200, _rpc(-32601, "Method not found", 3, data="x" * 200 + "…"))
        got, body = srv.request("POST", "/mcp", raw=b'{"q":"' + b"x" * (8 * 1024 * 1024) + b'"}', headers=ACCEPT)
        assert (got, body) == (413, _rpc(-32600, "Invalid Request: request body exceeds 8388608 bytes"))
        got, body = srv.request("POST", "/mcp", body={"jsonrpc": "2.0", "id": 4, "method": "ping"}, headers=ACCEPT)
        assert (got, body) == (200, {"jsonrpc": "2.0", "id": 4, "result": {}})
    finally:
        assert srv.stop() == 0
    log = (tmp_path / "server.log").read_text()
    assert "Terminating session" not in log and "api.crashed" not in log, log[-3000:]


def test_mcp_over_stdio_answers_every_refused_line(tmp_path):
    lines = [b"not json", b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}',
             b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
             json.dumps({"jsonrpc": "2.0", "id": 5, "method": LONG}).encode(),
             b'{"jsonrpc":"2.0","id":6}', b"",
             b'{"jsonrpc":"2.0","id":8,"method":"ping"}']
    proc = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "mcp", "--data-dir", str(tmp_path / "data")],
                          input=b"\n".join(lines) + b"\n", capture_output=True, timeout=120)
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(a.get("id"), a.get("error", {}).get("code")) for a in answers] == [
        (None, -32700), (None, -32600), (None, -32600), (5, -32601), (6, -32600), (8, None)], proc.stderr[-3000:]
    assert answers[3]["error"]["data"] == "x" * 200 + "…"
    assert answers[-1] == {"jsonrpc": "2.0", "id": 8, "result": {}}
