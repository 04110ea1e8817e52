"""What a scoped token's reads may do and tell: a read never changes state, a denial does not tell a
missing agent from an invisible one, and metadata naming sessions the caller may not see stays hidden."""

from __future__ import annotations

from sessionsearch.api.tools import run_tool
from sessionsearch.auth import OPERATOR, Caller
from sessionsearch.search.query import Requester

from .helpers import chain, engine_at

MAIN = "agent:main:main"
SCOPED = Caller(Requester(MAIN, False))


async def _archived(engine, key: str = MAIN) -> dict:
    await engine.append(key, chain("m", [("user", "archived loan talk"), ("assistant", "noted")]), sessionId="s1")
    await engine.archive(key)
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
        assert (await engine.search(query="loan")) == {"results": [], "archivedTranscriptsExcluded": 1}


async def test_the_operators_history_of_an_archived_session_still_restores_it(backend):
    async with engine_at(backend) as engine:
        await _archived(engine)
        read = await run_tool(engine, "sessions_history", {"sessionKey": MAIN}, OPERATOR)
        assert [m["content"] for m in read["messages"]] == ["archived loan talk", "noted"]
        listed = (await engine.list_sessions())["sessions"]
        assert [s["archived"] for s in listed if s["sessionKey"] == MAIN] == [False]
