"""The HTTP layer's edges through a real server: hostile bodies, the token on every route, 405s, 413s."""

from __future__ import annotations

import http.client
import json
import socket

from ..server import Server

KEY = "agent:main:main"


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


def test_a_body_nested_past_512_levels_is_400_on_methods_and_tools(server):
    too_deep = {"error": {"code": "INVALID_REQUEST", "message": "request body is nested more than 512 levels deep"}}
    for path in ("sessions.search", "tools/sessions_search", "tools/sessions_history", "transcript.append"):
        assert server.post(path, raw=nested(1000)) == (400, too_deep), path
        assert server.post(path, raw=nested(513)) == (400, too_deep), path
        assert server.post(path, raw=b"[" * 100_000) == (400, too_deep), path
    # at the limit the body parses and the method names the field at fault
    assert server.post("sessions.search", raw=nested(512)) == (
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
              ("GET", "/nope", 404, False), ("OPTIONS", "/v1/sessions.search", 405, False),
              ("GET", "/", 307, True), ("HEAD", "/", 307, True), ("POST", "/", 405, True)]  # / leads to the open /ui
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


def test_a_body_over_the_limit_gets_its_413_not_a_connection_reset(tmp_path):
    """urllib sends the whole body before it reads: the server must take it in before it answers."""
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_MAX_BODY_BYTES="65536")
    too_large = {"error": {"code": "INVALID_REQUEST", "message": "request body exceeds 65536 bytes"}}
    size = 16 * 1024 * 1024  # far past the socket buffers, which hide the problem for small bodies

    def chunks():
        yield b'{"query":"'
        for _ in range(size // 65536):
            yield b"x" * 65536
        yield b'"}'

    try:
        for _ in range(3):
            assert srv.post("sessions.search", raw=b'{"query":"' + b"x" * size + b'"}') == (413, too_large)
            assert srv.post("sessions.search", raw=chunks(), headers={"Transfer-Encoding": "chunked"}) == (
                413, too_large)
            assert srv.post("tools/sessions_search", raw=b"x" * 65537) == (413, too_large)
        assert srv.post("sessions.search", raw=b'{"query":"x","sessionId":"' + b"x" * 65000 + b'"}')[0] == 200
    finally:
        assert srv.stop() == 0


def test_an_early_answer_takes_in_the_body_the_client_is_still_sending(tmp_path):
    """A 401 or a 404 answered before the body was read still reaches a client that sends first."""
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_API_TOKEN="s3cret")
    body = b'{"query":"' + b"x" * (4 * 1024 * 1024) + b'"}'
    try:
        assert srv.post("sessions.search", raw=body)[0] == 401
        assert srv.post("nope", raw=body, headers={"Authorization": "Bearer s3cret"})[0] == 404
        assert srv.request("POST", "/healthz", raw=body)[0] == 405
    finally:
        assert srv.stop() == 0


def test_a_client_waiting_for_100_continue_gets_the_413_without_sending_its_body(server):
    status, headers, body = exchange_raw(server, b"POST /v1/sessions.search HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                 b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
                                                 b"Content-Length: 1073741824\r\n\r\n")
    assert status == 413 and headers["connection"] == "close"
    assert json.loads(body)["error"]["message"] == "request body exceeds 8388608 bytes"


def test_a_body_past_the_discard_bound_is_cut_off_with_its_413(server):
    """Past 64 MiB the server stops reading: it answers and closes rather than read a body without end."""
    status, headers, body = exchange_raw(server, b"POST /v1/sessions.search HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                 b"Content-Type: application/json\r\n"
                                                 b"Content-Length: 1073741824\r\n\r\n")
    assert status == 413 and headers["connection"] == "close"


def exchange_raw(server: Server, head: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send a request head only and read the answer to the end of the connection."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head_text, _, body = data.partition(b"\r\n\r\n")
    lines = head_text.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def test_a_body_is_utf8_json_whatever_content_type_a_client_names(server):
    search = b'{"query":"x"}'
    # curl -d and urllib send form-urlencoded unless told otherwise: the body is JSON all the same
    for media in ("application/json; charset=utf-8", "text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": media} if media else {}
        assert exchange(server, "POST", "/v1/sessions.search", search, headers)[0] == 200, media
    assert exchange(server, "POST", "/v1/index.status")[0] == 200  # no body: nothing to type, read as {}
    assert server.post("sessions.search", raw=b'{"query":"caf\xe9"}') == (
        400, {"error": {"code": "INVALID_REQUEST", "message": "request body is not UTF-8: byte 0xe9 at offset 13"}})
    assert server.post("sessions.search", raw='{"query":"x"}'.encode("utf-16"))[1]["error"]["message"] == (
        "request body is not UTF-8: byte 0xff at offset 0")
    assert server.post("sessions.search", raw=b"{\"query\": \"x\",}")[1]["error"]["message"].startswith(
        "request body is not valid JSON: ")


def test_a_page_of_another_origin_or_a_rebound_name_is_refused_without_touching_the_store(server):
    """A browser page can post a form to a loopback server without asking first; it names itself."""
    upsert = json.dumps({"sessionKey": "agent:main:csrf", "label": "planted"}).encode()
    form = {"Content-Type": "text/plain"}
    status, _, body = exchange(server, "POST", "/v1/sessions.upsert", upsert, {**form, "Origin": "https://evil.example"})
    assert status == 403 and json.loads(body)["error"] == {"code": "FORBIDDEN", "message": (
        f"cross-origin request refused: Origin 'https://evil.example' is not this server ('127.0.0.1:{server.port}')")}
    status, _, body = exchange(server, "POST", "/v1/sessions.upsert", upsert, {**form, "Host": "evil.example:80"})
    assert status == 403 and json.loads(body)["error"]["message"] == (
        "Host 'evil.example:80' is not a loopback name: without SESSIONSEARCH_API_TOKEN the server answers "
        "only to 127.0.0.1, [::1] and localhost")
    assert exchange(server, "POST", "/v1/sessions.upsert", upsert, {"Origin": "null"})[0] == 403
    assert [s["sessionKey"] for s in server.post("sessions.list")[1]["sessions"]] == []
    # the page's own origin, and the other loopback names, are this server
    for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", "[::1]:1"):
        assert exchange(server, "POST", "/v1/sessions.upsert", upsert,
                        {"Host": host, "Origin": f"http://{host}"})[0] == 200, host
    assert exchange(server, "GET", "/healthz", headers={"Host": "evil.example"})[0] == 200  # probes stay open


def test_with_a_token_a_page_of_another_origin_behind_a_proxy_is_answered(tmp_path):
    server = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_API_TOKEN="t0ken")
    try:
        status, _, _ = exchange(server, "POST", "/v1/sessions.list", b"{}", {
            "Authorization": "Bearer t0ken", "Origin": "https://search.example.com", "Host": "127.0.0.1:8780"})
        assert status == 200
    finally:
        assert server.stop() == 0


def test_a_request_that_conflicts_with_what_is_stored_is_409(server):
    """Well-formed requests a client cannot know to be wrong before it sends them: 409, not 400."""
    assert server.post("transcript.append", {"sessionKey": KEY, "sessionId": "s1", "events": []})[0] == 200
    conflict = {"code": "INVALID_REQUEST", "message": "sessionId 's1' belongs to another session key"}
    assert server.post("transcript.append", {"sessionKey": "agent:main:other", "sessionId": "s1", "events": []}) == (
        409, {"error": conflict})
    assert server.post("sessions.upsert", {"sessionKey": "agent:main:other", "sessionId": "s1"}) == (
        409, {"error": conflict})
    assert server.post("sessions.rotate", {"sessionKey": KEY, "sessionId": "s1"}) == (
        409, {"error": {"code": "INVALID_REQUEST", "message": "sessionId 's1' already exists"}})
    assert server.post("sessions.archive", {"sessionKey": KEY})[0] == 200
    assert server.post("transcript.append", {"sessionKey": KEY, "events": [
        {"type": "message", "id": "m1", "message": {"role": "user", "content": "late"}}]}) == (
        409, {"error": {"code": "INVALID_REQUEST",
                        "message": f"session {KEY!r} is archived; restore it before appending"}})


def test_a_request_uvicorn_cannot_parse_is_answered_in_the_json_error_shape(server):
    for head in (b"GARBAGE\r\n\r\n", b"GET /\xff HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                 b"POST /v1/sessions.search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n"):
        status, headers, body = exchange_raw(server, head)
        assert status == 400 and headers["content-type"] == "application/json", head
        assert json.loads(body) == {"error": {"code": "INVALID_REQUEST", "message": (
            "malformed HTTP request: the request line or a header could not be parsed")}}


def test_an_unknown_path_is_echoed_cut_short(server):
    status, body = server.get("/" + "a" * 100_000)
    assert status == 404 and body["error"]["message"] == "no route GET /" + "a" * 199 + "…"


def test_an_unknown_method_or_tool_name_is_echoed_cut_short(server):
    for path, what in (("", "method"), ("tools/", "tool")):
        status, body = server.post(path + "m" * 10_000, {})
        assert status == 404 and body["error"]["message"] == f"unknown {what} '{'m' * 200}…'", what
