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


def test_the_token_guards_every_route_but_the_health_probes(tmp_path):
    """Every route and method, each with no token, wrong tokens and the right one."""
    from sessionsearch.api.openapi import METHODS, openapi_document

    # (method, path, the status with the right token, whether it answers without one)
    table = [("POST", f"/v1/{name}", 200 if name in ("sessions.list", "index.status") else 400, False)
             for name in METHODS]
    table += [("POST", "/v1/tools/sessions_search", 200, False), ("POST", "/v1/tools/sessions_history", 200, False),
              ("GET", "/metrics", 200, False), ("GET", "/openapi.json", 200, False),
              ("GET", "/healthz", 200, True), ("HEAD", "/healthz", 200, True), ("GET", "/readyz", 200, True),
              ("POST", "/healthz", 405, True),
              ("GET", "/v1/sessions.search", 405, False), ("DELETE", "/metrics", 405, False),
              ("POST", "/v1/nope", 404, False), ("POST", "/v1/tools/nope", 404, False), ("POST", "/v1/", 404, False),
              ("GET", "/nope", 404, False), ("GET", "/", 404, False), ("OPTIONS", "/v1/sessions.search", 405, False)]
    assert {path for _, path, _, _ in table} >= set(openapi_document()["paths"])  # no documented route left out
    wrong = [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer s3cret2"},
             {"Authorization": "Basic czNjcmV0"}, {"Authorization": "s3cret"}, {"Authorization": "Bearer"}]
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_API_TOKEN="s3cret")
    try:
        for method, path, status, open_route in table:
            body = b"{}" if method == "POST" else None
            json_type = {"Content-Type": "application/json"} if body else {}
            for headers in wrong:
                got, answer_headers, answer = exchange(srv, method, path, body, {**json_type, **headers})
                if open_route:
                    assert got == status, (method, path, headers, got)
                    continue
                assert got == 401 and answer_headers["WWW-Authenticate"] == "Bearer", (method, path, headers, got)
                assert method == "HEAD" or json.loads(answer) == {
                    "error": {"code": "UNAUTHORIZED", "message": "a valid bearer token is required"}}
            for right in ("Bearer s3cret", "bearer s3cret"):
                got = exchange(srv, method, path, body, {**json_type, "Authorization": right})[0]
                assert got == status, (method, path, right, got)
    finally:
        assert srv.stop() == 0
