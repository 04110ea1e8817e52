"""What a scoped token's reads may do and tell: a read never changes state, a denial does not tell a
missing agent from an invisible one, and metadata naming sessions the caller may not see stays hidden."""

from __future__ import annotations

import json

from sessionsearch.api.tools import run_tool
from sessionsearch.auth import OPERATOR, Caller
from sessionsearch.identity import Requester
from sessionsearch.protocol import AppendParams, ListParams, SearchParams, SessionRef, UpsertParams

from ..helpers import chain, engine_at

MAIN = "agent:main:main"
SCOPED = Caller(Requester(MAIN, False))


async def _archived(engine, key: str = MAIN) -> dict:
    await engine.append(AppendParams(sessionKey=key, events=chain("m", [("user", "archived loan talk"), ("assistant", "noted")]), sessionId="s1"))
    await engine.archive(SessionRef(sessionKey=key))
    return next(s for s in (await engine.list_sessions())["sessions"] if s["sessionKey"] == key)


async def test_a_scoped_tokens_history_of_an_archived_session_is_refused_and_leaves_it_archived(backend):
    async with engine_at(backend) as engine:
        assert (await _archived(engine))["archived"] is True
        for body in ({"sessionKey": MAIN}, {"sessionKey": MAIN, "messageId": "m1"},
                     {"sessionKey": MAIN, "messageId": "m1", "sessionId": "s1"}):
            read = await run_tool(engine, "sessions_history", body, SCOPED)
            assert read == {"status": "error", "error": (
                "session 'agent:main:main' is archived, and opening it would restore it, which this read-only "
                "credential may not do; the operator can restore it (sessions.restore)")}
        listed = (await engine.list_sessions())["sessions"]
        assert [s["archived"] for s in listed if s["sessionKey"] == MAIN] == [True]
        assert (await engine.search(SearchParams(query="loan"))) == {"results": [], "archivedTranscriptsExcluded": 1}


async def test_the_operators_history_of_an_archived_session_still_restores_it(backend):
    async with engine_at(backend) as engine:
        await _archived(engine)
        read = await run_tool(engine, "sessions_history", {"sessionKey": MAIN}, OPERATOR)
        assert [m["content"] for m in read["messages"]] == ["archived loan talk", "noted"]
        listed = (await engine.list_sessions())["sessions"]
        assert [s["archived"] for s in listed if s["sessionKey"] == MAIN] == [False]


async def test_a_missing_agent_and_an_invisible_one_are_denied_alike(backend):
    async with engine_at(backend, visibility="self") as engine:
        await engine.append(AppendParams(sessionKey=MAIN, events=chain("m", [("user", "loan")])))
        await engine.append(AppendParams(sessionKey="agent:ops-2:main", events=chain("o", [("user", "loan")])))
        for agent in ("ops-2", "nope"):
            answer = await run_tool(engine, "sessions_search", {"query": "loan", "agentId": agent}, SCOPED)
            assert answer == {"status": "forbidden", "error": f"agent {agent!r} is not visible to this requester"}
            assert await run_tool(engine, "sessions_list", {"agentId": agent}, SCOPED) == {"sessions": []}
        assert (await run_tool(engine, "sessions_search", {"query": "loan", "agentId": "nope"}, OPERATOR)) == {
            "status": "error", "error": "agent 'nope' not found"}


async def test_a_listing_names_a_spawning_or_parent_session_only_where_the_caller_may_see_it(backend):
    child, sibling, elsewhere = "agent:main:subagent:c1", "agent:main:subagent:c2", "agent:ops-2:main"
    async with engine_at(backend, visibility="agent") as engine:
        for n, key in enumerate((MAIN, child, sibling, elsewhere)):
            await engine.append(AppendParams(sessionKey=key, events=chain(f"k{n}-", [("user", "loan")])))
        await engine.upsert_session(UpsertParams(sessionKey=child, spawnedBy=elsewhere, parentSessionKey=elsewhere, kind="subagent"))
        await engine.upsert_session(UpsertParams(sessionKey=sibling, spawnedBy=MAIN, parentSessionKey=child, kind="subagent"))
        listed = {s["sessionKey"]: s for s in (await run_tool(engine, "sessions_list", {}, SCOPED))["sessions"]}
        assert set(listed) == {MAIN, child, sibling}
        assert (listed[child]["spawnedBy"], listed[child]["parentSessionKey"]) == (None, None)
        assert (listed[sibling]["spawnedBy"], listed[sibling]["parentSessionKey"]) == (MAIN, child)
        operator = {s["sessionKey"]: s for s in (await engine.list_sessions())["sessions"]}
        assert (operator[child]["spawnedBy"], operator[child]["parentSessionKey"]) == (elsewhere, elsewhere)


async def test_sessions_list_fits_its_byte_budget_and_says_truncated(backend):
    async with engine_at(backend, list_response_max_bytes=4096) as engine:
        for i in range(40):
            await engine.append(AppendParams(sessionKey=f"agent:main:s{i}", events=chain(f"s{i}-", [("user", "loan")])))
        await engine.upsert_session(UpsertParams(sessionKey="agent:main:s0", label="L" * 1_000_000))
        listed = await engine.list_sessions(ListParams(limit=1000))
        assert listed["truncated"] is True and 0 < len(listed["sessions"]) < 40
        assert len(json.dumps(listed, ensure_ascii=False, separators=(",", ":")).encode()) <= 4096
        labels = [s["label"] for s in (await engine.list_sessions(ListParams(search="agent:main:s0")))["sessions"]]
        assert labels == ["L" * 1000 + "…"]
        assert "truncated" not in await engine.list_sessions(ListParams(search="agent:main:s1"))
        assert (await engine.list_sessions(ListParams(limit=3)))["truncated"] is True  # more existed past the limit


async def test_the_mcp_sessions_list_answer_keeps_to_the_budget_with_a_huge_label(backend):
    from sessionsearch.api.mcp_server import _answer

    async with engine_at(backend) as engine:
        for i in range(300):
            await engine.append(AppendParams(sessionKey=f"agent:main:s{i}", events=chain(f"s{i}-", [("user", "loan")])))
            await engine.upsert_session(UpsertParams(sessionKey=f"agent:main:s{i}", label=f"{i} " + "L" * 2000))
        await engine.upsert_session(UpsertParams(sessionKey=MAIN, label="L" * 1_000_000))
        result = _answer(await run_tool(engine, "sessions_list", {"limit": 1000}, SCOPED))
        assert result.structured_content["truncated"] is True
        assert len(result.content[0].text.encode()) <= engine.settings.list_response_max_bytes
