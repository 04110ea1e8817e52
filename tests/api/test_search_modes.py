"""Search by meaning (`mode`, SPEC §4) through the doors a user reaches it by: `POST /v1/sessions.search`,
the agent tool at `/v1/tools/sessions_search`, `index.status`, the OpenAPI document and MCP (stdio and
`/mcp`, the official SDK's client), each against a real server process on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionsearch.api.openapi import openapi_document
from sessionsearch.protocol import AppendParams

from ..helpers import chain, engine_at, until, wait_until
from ..server import Server
from .test_mcp import OPERATOR_TOKEN, SCOPED_TOKEN, call, http, start, stdio, stop

KEY, OTHER = "agent:main:main", "agent:main:cars"
QUESTION = "how much will I pay each month for the house?"  # shares no word with the answer below
ANSWER = "Over 25 years at 3.1% the monthly payment is about 1,151 EUR."
CONVERSATION = [("user", "I'm applying for a mortgage of 240,000 EUR with Banca Sella at 3.1% fixed."),
                ("assistant", ANSWER),
                ("user", "Remind me the notary appointment is on March 3rd.")]


def seed(server: Server) -> None:
    assert server.post("transcript.append", {"sessionKey": KEY, "sessionId": "s1",
                                             "events": chain("m", CONVERSATION)})[0] == 200
    assert server.post("transcript.append", {"sessionKey": OTHER, "events": chain("c", [
        ("user", "Should I sell the car to cover the deposit?")])})[0] == 200


def settled(server: Server, body: dict, path: str = "/v1/sessions.search") -> dict:
    """The answer once nothing in scope waits to be embedded (the search itself queues the work)."""
    def complete() -> dict | None:
        status, answer = server.request("POST", path, body)
        assert status == 200, answer
        return None if answer.get("indexing") else answer

    return wait_until(complete, 90, f"{body} to answer without indexing: true")


@pytest.fixture
def store_server(backend, tmp_path):
    """A real server over SQLite files or PostgreSQL (the `backend` fixture)."""
    env = {k: v for k, v in backend.env().items() if k != "SESSIONSEARCH_DATA_DIR"}
    srv = Server(backend.data_dir / "data", tmp_path / "server.log", **env)
    yield srv
    assert srv.stop() == 0
    log = srv.log_path.read_text()
    assert "api.crashed" not in log and "api.failed" not in log, log[-3000:]


def test_hybrid_answers_a_question_that_shares_no_word_with_the_message(store_server):
    seed(store_server)
    keyword = store_server.post("sessions.search", {"query": QUESTION})[1]
    assert keyword["results"] == [] and "indexing" not in keyword  # every word must match: none does
    hybrid = settled(store_server, {"query": QUESTION, "mode": "hybrid"})
    top = hybrid["results"][0]
    assert (top["sessionKey"], top["messageId"], top["matchedBy"]) == (KEY, "m2", ["semantic"])
    assert "monthly payment" in top["snippet"]


def test_a_hit_found_both_ways_says_so_and_keyword_hits_carry_no_matched_by(store_server):
    seed(store_server)
    hybrid = settled(store_server, {"query": "monthly payment", "mode": "hybrid"})
    top = hybrid["results"][0]
    assert (top["messageId"], top["matchedBy"]) == ("m2", ["keyword", "semantic"])  # both lists: ranked first
    assert all(hit["matchedBy"] == ["semantic"] for hit in hybrid["results"][1:])  # no other message has both words
    keyword = store_server.post("sessions.search", {"query": "monthly payment"})[1]
    assert [hit["messageId"] for hit in keyword["results"]] == ["m2"]
    assert "matchedBy" not in keyword["results"][0]  # the keyword answer is what it always was


def test_semantic_ranks_by_meaning_alone_and_scopes_like_keyword(store_server):
    seed(store_server)
    semantic = settled(store_server, {"query": QUESTION, "mode": "semantic"})
    assert semantic["results"][0]["messageId"] == "m2"
    assert all(hit["matchedBy"] == ["semantic"] for hit in semantic["results"])
    scores = [hit["score"] for hit in semantic["results"]]
    assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)  # cosine similarity
    cars = {"query": "selling the car for a deposit", "mode": "semantic"}
    assert settled(store_server, cars)["results"][0]["messageId"] == "c1"
    scoped = settled(store_server, {**cars, "sessionKeys": [KEY]})
    assert "c1" not in [hit["messageId"] for hit in scoped["results"]]
    assert {hit["sessionKey"] for hit in scoped["results"]} <= {KEY}
    users = settled(store_server, {"query": QUESTION, "mode": "semantic", "role": "user"})
    assert "m2" not in [hit["messageId"] for hit in users["results"]]  # the assistant's answer, left out


def test_the_agent_tool_takes_mode_and_answers_its_errors_in_the_body(store_server):
    seed(store_server)
    found = settled(store_server, {"query": QUESTION, "mode": "hybrid"}, "/v1/tools/sessions_search")
    assert found["results"][0]["messageId"] == "m2" and found["results"][0]["matchedBy"] == ["semantic"]
    assert store_server.post("tools/sessions_search", {"query": "loan", "mode": "semantic", "order": "recent"}) == (
        200, {"status": "error", "error": 'order "recent" needs mode "keyword"'})
    status, bad = store_server.post("tools/sessions_search", {"query": "loan", "mode": "vector"})
    assert status == 200 and bad["status"] == "error" and "mode" in bad["error"]


def test_the_http_api_refuses_recent_order_with_meaning_and_an_unknown_mode(server):
    status, answer = server.post("sessions.search", {"query": "loan", "mode": "hybrid", "order": "recent"})
    assert (status, answer["error"]) == (400, {"code": "INVALID_REQUEST",
                                              "message": 'order "recent" needs mode "keyword"'})
    status, answer = server.post("sessions.search", {"query": "loan", "mode": "fuzzy"})
    assert status == 400 and "mode" in answer["error"]["message"]
    assert server.post("sessions.search", {"query": "loan", "mode": "keyword", "order": "recent"})[0] == 200


def test_with_the_embedder_off_meaning_is_refused_and_keyword_goes_on(tmp_path):
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_EMBEDDER="none")
    try:
        seed(srv)
        assert srv.post("sessions.search", {"query": "mortgage"})[1]["results"][0]["messageId"] == "m1"
        for mode in ("semantic", "hybrid"):
            assert srv.post("sessions.search", {"query": QUESTION, "mode": mode}) == (
                400, {"error": {"code": "INVALID_REQUEST", "message": "semantic search is disabled"}})
        assert srv.post("tools/sessions_search", {"query": QUESTION, "mode": "hybrid"}) == (
            200, {"status": "error", "error": "semantic search is disabled"})
    finally:
        assert srv.stop() == 0


def test_index_status_counts_embedded_messages_and_the_backlog_until_it_drains(store_server):
    seed(store_server)
    agent = store_server.post("index.status", {})[1]["agents"][0]
    assert agent["embeddedMessages"] + agent["embeddingBacklog"] == 4  # every message: embedded or waiting
    settled(store_server, {"query": QUESTION, "mode": "semantic"})

    def drained() -> dict | None:
        status = store_server.post("index.status", {})[1]["agents"][0]
        return status if status["embeddingBacklog"] == 0 else None

    agent = wait_until(drained, 90, "the embedding backlog to drain")
    assert agent["embeddedMessages"] == 4 and agent["indexedMessages"] == 4


def test_the_openapi_document_describes_mode_matched_by_and_the_embedding_counts():
    document = openapi_document()
    body = document["paths"]["/v1/sessions.search"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["mode"]["enum"] == ["keyword", "semantic", "hybrid", None]  # null: absent, keyword
    assert body["not"]["properties"] == {"order": {"const": "recent"}, "mode": {"enum": ["semantic", "hybrid"]}}
    answer = document["paths"]["/v1/sessions.search"]["post"]["responses"]["200"]["content"]["application/json"]
    hit = answer["schema"]["oneOf"][0]["properties"]["results"]["items"]["anyOf"][0]
    assert hit["properties"]["matchedBy"]["items"] == {"enum": ["keyword", "semantic"]}
    assert "matchedBy" not in hit["required"]  # keyword hits have none
    status = document["paths"]["/v1/index.status"]["post"]["responses"]["200"]["content"]["application/json"]
    agent = status["schema"]["properties"]["agents"]["items"]
    assert {"embeddedMessages", "embeddingBacklog"} <= set(agent["required"])


async def seed_engine(data_dir: Path) -> None:
    async with engine_at(data_dir) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", CONVERSATION), sessionId="s1"))


async def test_mcp_offers_mode_with_when_to_use_which_and_answers_by_meaning(tmp_path):
    await seed_engine(tmp_path / "data")
    async with stdio(tmp_path) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == "sessions_search")
        mode = tool.input_schema["properties"]["mode"]
        assert mode["enum"] == ["keyword", "semantic", "hybrid"]
        for advice in ("names, ids and quotes", "what did we discuss about", "the words may differ"):
            assert advice in mode["description"], mode["description"]
        assert "matchedBy" in tool.description and 'mode "hybrid"' in tool.description
        assert not {"oneOf", "allOf", "anyOf", "not"} & set(tool.input_schema)

        async def complete() -> dict | None:  # the stdio server's in-process worker embeds what a search queued
            error, found = await call(client, "sessions_search", {"query": QUESTION, "mode": "hybrid"})
            assert not error, found
            return None if found.get("indexing") else found

        found = await until(complete, 90, "the hybrid search to answer without indexing: true")
        assert "indexing" not in found, found
        assert [(h["messageId"], h["matchedBy"]) for h in found["results"]][:1] == [("m2", ["semantic"])]
        assert await call(client, "sessions_search", {"query": "loan", "mode": "hybrid", "order": "recent"}) == (
            True, {"status": "error", "error": 'order "recent" needs mode "keyword"'})


async def test_a_scoped_token_searching_by_meaning_over_mcp_sees_only_its_own_session(tmp_path):
    srv = start(tmp_path, '\n[tools.sessions]\nvisibility = "self"\n')
    try:
        operator = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
        for key, events in ((KEY, chain("m", CONVERSATION)),
                            (OTHER, chain("c", [("user", "Our monthly payment for the flat is 900 EUR.")]))):
            assert srv.post("transcript.append", {"sessionKey": key, "events": events}, headers=operator)[0] == 200
        query = {"query": QUESTION, "mode": "semantic"}

        def complete() -> dict | None:
            answer = srv.post("sessions.search", query, headers=operator)[1]
            return None if answer.get("indexing") else answer

        everyone = wait_until(complete, 90, "the operator's search to complete")
        assert {hit["sessionKey"] for hit in everyone["results"]} == {KEY, OTHER}  # both close in meaning
        async with http(srv.url, SCOPED_TOKEN) as client:
            error, found = await call(client, "sessions_search", query)
            assert not error and "indexing" not in found, found
            assert {hit["sessionKey"] for hit in found["results"]} == {KEY}  # visibility self: never the other
            error, denied = await call(client, "sessions_search", {**query, "sessionKeys": [OTHER]})
            assert error and denied["status"] == "forbidden"
    finally:
        stop(srv)
