"""`null` stands for an absent optional field, in every method (docs/reference/http-api.md).

The optional fields come from the OpenAPI document's request schemas, so a field added to a
method is held to the rule without this file changing.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest

from sessionsearch.api.openapi import REQUESTS
from sessionsearch.api.tools import call
from sessionsearch.auth import Caller, bind_requester
from sessionsearch.errors import InvalidRequest
from sessionsearch.identity import Requester
from sessionsearch.protocol import AppendParams

from ..helpers import chain, engine_at

KEY = "agent:main:main"
# a body each read answers something with; every optional field is tried null beside it
READS = {"sessions.search": {"query": "loan"}, "sessions.history": {"sessionKey": KEY},
         "sessions.list": {}, "index.status": {}}


def optional_fields(method: str, body: dict) -> list[str]:
    schema = REQUESTS[method]
    return sorted(set(schema["properties"]) - set(schema["required"]) - set(body))


@asynccontextmanager
async def seeded(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "what about the loan?"), ("assistant", "The loan is approved.")]), sessionId="s1"))
        yield engine


async def test_every_optional_field_of_every_read_answers_null_as_if_absent(backend):
    async with seeded(backend) as engine:
        tried = []
        for method, body in READS.items():
            absent = await call(engine, method, dict(body))
            for name in optional_fields(method, body):
                assert await call(engine, method, {**body, name: None}) == absent, f"{method} {name}: null"
                tried.append(f"{method} {name}")
        assert len(tried) >= 20 and "sessions.search mode" in tried and "sessions.history includeTools" in tried


async def test_a_null_mode_searches_by_keyword(backend):
    async with seeded(backend) as engine:
        answer = await call(engine, "sessions.search", {"query": "loan", "mode": None})
        assert [h["messageId"] for h in answer["results"]] == ["m2", "m1"] and "matchedBy" not in answer["results"][0]


async def test_a_null_query_beside_queries_is_absent_and_both_null_is_refused(backend):
    async with seeded(backend) as engine:
        batch = await call(engine, "sessions.search", {"queries": ["loan"]})
        assert await call(engine, "sessions.search", {"queries": ["loan"], "query": None}) == batch
        assert "states" in batch
        with pytest.raises(InvalidRequest, match="exactly one of query and queries"):
            await call(engine, "sessions.search", {"query": None, "queries": None})


async def test_a_null_sandboxed_in_the_requester_is_absent(backend):
    async with seeded(backend) as engine:
        own = {"sessionKey": KEY}
        assert (await call(engine, "sessions.search", {"query": "loan", "requester": {**own, "sandboxed": None}})
                == await call(engine, "sessions.search", {"query": "loan", "requester": own}))
        # a sandboxed scoped token's own requester, sent with a null sandboxed, is its own
        bound = bind_requester({"requester": {**own, "sandboxed": None}}, Caller(Requester(KEY, sandboxed=True)))
        assert bound["requester"] == {"sessionKey": KEY, "sandboxed": True}


async def test_a_null_unknown_field_is_still_refused(backend):
    async with seeded(backend) as engine:
        for method, body in READS.items():
            with pytest.raises(InvalidRequest, match="unknown field 'colour'"):
                await call(engine, method, {**body, "colour": None})


async def test_the_writes_take_null_for_each_optional_field(backend):
    async with seeded(backend) as engine:
        append = {"sessionKey": "agent:main:other", "events": chain("n", [("user", "hello")])}
        assert (await call(engine, "transcript.append", {**append, "sessionId": None}))["appended"] == 1
        rotated = await call(engine, "sessions.rotate", {"sessionKey": KEY, "sessionId": None, "reason": None})
        assert rotated["previousSessionId"] == "s1"
        # a null incognito has nothing to clear: the session stays as it was
        await call(engine, "sessions.upsert", {"sessionKey": "agent:main:secret", "incognito": True})
        assert (await call(engine, "sessions.upsert", {"sessionKey": "agent:main:secret", "incognito": None,
                                                      "label": "x"})) == {"sessionKey": "agent:main:secret",
                                                                          "created": False}
        listed = await call(engine, "sessions.list", {})
        assert "agent:main:secret" not in [s["sessionKey"] for s in listed["sessions"]]
        for method, body in (("sessions.upsert", {"sessionKey": "agent:main:new"}),
                             ("transcript.append", append), ("sessions.rotate", {"sessionKey": KEY})):
            for name in optional_fields(method, body):
                await call(engine, method, {**body, name: None})  # raises on a refusal
