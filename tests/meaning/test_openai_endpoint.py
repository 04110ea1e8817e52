"""The meaning index over an OpenAI-compatible endpoint on loopback, as an operator configures it
(SPEC §7), and what a search does when that endpoint is slow or down: keyword answers go on."""

from __future__ import annotations

from collections import deque

import pytest

from sessionsearch.protocol import AppendParams, SearchParams

from ..embed.endpoint import EmbeddingsEndpoint, Fault
from ..helpers import chain, engine_at, ids

KEY = "agent:main:loan"
TALK = [("user", "We agreed to take the mortgage with the fixed rate for twenty years."),
        ("assistant", "Noted: the dentist appointment moved to Thursday morning.")]


@pytest.fixture
def endpoint():
    with EmbeddingsEndpoint(faults=deque()) as e:
        yield e


def _openai(endpoint: EmbeddingsEndpoint, **more):
    return {"embedder": "openai", "embedder_url": endpoint.url, "embedder_model": "nomic-embed-text",
            "embedder_dimensions": 256, **more}


async def test_the_endpoint_embeds_the_index_and_the_query(backend, endpoint):
    async with engine_at(backend, **_openai(endpoint)) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", TALK)))
        assert (await engine.embed("main", 1)).outcome == "embedded"
        found = await engine.search(SearchParams(query="what did we decide about the home loan", mode="semantic"))
        assert ids(found)[:1] == ["m1"] and "indexing" not in found
        assert all(seen.body["model"] == "nomic-embed-text" for seen in endpoint.seen)
        status = (await engine.index_status())["agents"][0]
        assert (status["embeddedMessages"], status["embeddingBacklog"]) == (2, 0)


async def test_a_slow_endpoint_leaves_the_keyword_part_of_a_hybrid_search_answered(backend, endpoint):
    async with engine_at(backend, **_openai(endpoint), search_time_limit_ms=3000) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", TALK)))
        assert (await engine.embed("main", 1)).outcome == "embedded"
        endpoint.faults.extend([Fault("sleep", seconds=60)] * 4)  # every try of the query's embedding hangs
        found = await engine.search(SearchParams(query="mortgage", mode="hybrid"))
        assert ids(found) == ["m1"] and found["indexing"] is True
        assert found["results"][0]["matchedBy"] == ["keyword"]


async def test_an_endpoint_that_is_down_leaves_semantic_search_empty_and_indexing(backend, endpoint):
    async with engine_at(backend, **_openai(endpoint)) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", TALK)))
        assert (await engine.embed("main", 1)).outcome == "embedded"
        endpoint.faults.extend([Fault("status", status=503, body='{"error":"overloaded"}')] * 8)
        assert await engine.search(SearchParams(query="home loan", mode="semantic")) == {"results": [], "indexing": True}
        keyword = await engine.search(SearchParams(query="dentist"))
        assert ids(keyword) == ["m2"] and "indexing" not in keyword


MALFORMED = {
    "an integer past a float's range": Fault("replace", body='{"data": [{"index": 0, "embedding": [1' + "0" * 400 + "]}]}"),
    "JSON nested past the parser's depth": Fault("replace", body="[" * 200_000 + "]" * 200_000),
    "a negative Content-Length": Fault("raw", body="HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}"),
    "header lines without end": Fault("endless_headers"),
}


@pytest.mark.parametrize("answer", list(MALFORMED))
async def test_a_malformed_answer_leaves_hybrid_search_its_keyword_hits(backend, endpoint, answer):
    async with engine_at(backend, **_openai(endpoint, embedder_attempts=2)) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", TALK)))
        assert (await engine.embed("main", 1)).outcome == "embedded"
        endpoint.faults.extend([MALFORMED[answer]] * 2)  # both tries of the query's embedding
        found = await engine.search(SearchParams(query="mortgage", mode="hybrid"))
        assert ids(found) == ["m1"] and found["indexing"] is True
        assert found["results"][0]["matchedBy"] == ["keyword"]
