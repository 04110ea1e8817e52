"""The HTTP layer's edges through a real server: hostile bodies, the token on every route, 405s, 413s."""

from __future__ import annotations

import http.client
import json

import pytest

from .server import Server

KEY = "agent:main:main"


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path / "data", tmp_path / "server.log")
    yield srv
    assert srv.stop() == 0
    log = srv.log_path.read_text()
    assert "api.crashed" not in log and "api.failed" not in log


def exchange(server: Server, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request on its own connection; the status, the headers and the raw body."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def nested(levels: int) -> bytes:
    """A search body whose `query` holds `levels - 1` nested lists: `levels` levels in all."""
    return b'{"query":' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}"


def test_a_body_nested_past_100_levels_is_400_on_methods_and_tools(server):
    too_deep = {"error": {"code": "INVALID_REQUEST", "message": "request body is nested more than 100 levels deep"}}
    for path in ("sessions.search", "tools/sessions_search", "tools/sessions_history", "transcript.append"):
        assert server.post(path, raw=nested(1000)) == (400, too_deep), path
        assert server.post(path, raw=nested(101)) == (400, too_deep), path
        assert server.post(path, raw=b"[" * 100_000) == (400, too_deep), path
    # at the limit the body parses and the method names the field at fault
    assert server.post("sessions.search", raw=nested(100)) == (
        400, {"error": {"code": "INVALID_REQUEST", "message": "query must be a string"}})
    assert server.post("sessions.search", {"query": "still answers"})[0] == 200


def test_a_405_carries_an_allow_header_naming_the_methods_the_route_takes(server):
    for method, path, allow in (("GET", "/v1/sessions.search", "POST"), ("PUT", "/v1/tools/sessions_history", "POST"),
                                ("DELETE", "/v1/transcript.append", "POST"), ("POST", "/healthz", "GET, HEAD"),
                                ("OPTIONS", "/metrics", "GET, HEAD"), ("TRACE", "/openapi.json", "GET, HEAD")):
        status, headers, body = exchange(server, method, path)
        assert status == 405 and headers["Allow"] == allow, (method, path, headers.items())
        assert json.loads(body) == {"error": {"code": "INVALID_REQUEST",
                                              "message": f"{method} is not allowed on {path}; use {allow}"}}
