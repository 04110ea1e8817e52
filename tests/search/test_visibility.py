"""Visibility (SPEC §6): who may search and read which sessions, decided before limits."""

from __future__ import annotations

import asyncio

import pytest

from sessionsearch import Forbidden
from sessionsearch.protocol import AppendParams, HistoryParams, ListParams, SearchParams, SessionRef, UpsertParams
from sessionsearch.search.visibility import agent_allowed

from ..helpers import chain, engine_at, msg

MAIN = "agent:main:main"
DM = "agent:main:whatsapp:dm:+15550001"
CHILD = "agent:main:subagent:c1"
GRANDCHILD = "agent:main:subagent:c2"
OTHER_AGENT = "agent:ops-2:main"
SPAWNED_ELSEWHERE = "agent:ops-2:subagent:x"
SECRET = "agent:main:incognito"


async def _world(engine):
    for n, key in enumerate([MAIN, DM, CHILD, GRANDCHILD, OTHER_AGENT, SPAWNED_ELSEWHERE, SECRET]):
        await engine.append(AppendParams(sessionKey=key, events=chain(f"k{n}-", [("user", f"shared word from {key}")])))
    await engine.upsert_session(UpsertParams(sessionKey=CHILD, spawnedBy=DM, kind="subagent"))
    await engine.upsert_session(UpsertParams(sessionKey=GRANDCHILD, parentSessionKey=CHILD, kind="subagent"))
    await engine.upsert_session(UpsertParams(sessionKey=SPAWNED_ELSEWHERE, spawnedBy=DM, kind="subagent"))
    await engine.upsert_session(UpsertParams(sessionKey=SECRET, incognito=True))


async def keys_seen(engine, requester=None, **body):
    if requester is not None:
        body["requester"] = requester if isinstance(requester, dict) else {"sessionKey": requester}
    result = await engine.search(SearchParams.of({"query": "shared word", "limit": 25, **body}))
    return sorted({h["sessionKey"] for h in result["results"]})


async def test_operators_see_every_session_but_incognito(backend):
    async with engine_at(backend) as engine:
        await _world(engine)
        assert await keys_seen(engine) == sorted([MAIN, DM, CHILD, GRANDCHILD, OTHER_AGENT, SPAWNED_ELSEWHERE])


async def test_all_reaches_other_agents_by_default(backend):
    async with engine_at(backend) as engine:
        await _world(engine)
        assert OTHER_AGENT in await keys_seen(engine, MAIN)


async def test_self_sees_only_its_own_session(backend):
    async with engine_at(backend, visibility="self") as engine:
        await _world(engine)
        assert await keys_seen(engine, DM) == [DM]


async def test_tree_sees_what_it_spawned_transitively_even_cross_agent(backend):
    async with engine_at(backend, visibility="tree") as engine:
        await _world(engine)
        assert await keys_seen(engine, DM) == sorted([DM, CHILD, GRANDCHILD, SPAWNED_ELSEWHERE])
        assert await keys_seen(engine, CHILD) == sorted([CHILD, GRANDCHILD])


async def test_tree_main_session_sees_all_of_its_agent(backend):
    async with engine_at(backend, visibility="tree") as engine:
        await _world(engine)
        assert await keys_seen(engine, MAIN) == sorted([MAIN, DM, CHILD, GRANDCHILD])


async def test_agent_sees_every_session_of_its_agent_only(backend):
    async with engine_at(backend, visibility="agent") as engine:
        await _world(engine)
        assert await keys_seen(engine, CHILD) == sorted([MAIN, DM, CHILD, GRANDCHILD])


async def test_agent_to_agent_disabled_blocks_other_agents_but_not_spawned(backend):
    async with engine_at(backend, agent_to_agent_enabled=False) as engine:
        await _world(engine)
        seen = await keys_seen(engine, DM)
        assert OTHER_AGENT not in seen and SPAWNED_ELSEWHERE in seen
        with pytest.raises(Forbidden):
            await engine.search(SearchParams(query="shared", agentId="ops-2", requester={"sessionKey": MAIN}))


async def test_allow_list_needs_both_agents(backend):
    async with engine_at(backend, agent_to_agent_allow=("main",)) as engine:
        await _world(engine)
        assert OTHER_AGENT not in await keys_seen(engine, MAIN)
    async with engine_at(backend, agent_to_agent_allow=("MAIN", "OPS-*")) as engine:
        assert OTHER_AGENT not in await keys_seen(engine, MAIN)  # exact ids are case-sensitive
    async with engine_at(backend, agent_to_agent_allow=("main", "OPS-*")) as engine:
        assert OTHER_AGENT in await keys_seen(engine, MAIN)  # wildcards are not


def test_allow_entries_match_wildcards_case_insensitively_and_ids_exactly():
    assert agent_allowed("ops-2", ())
    assert agent_allowed("ops-2", ("OPS-*",)) and agent_allowed("ops-2", ("*",))
    assert not agent_allowed("ops-2", ("OPS-2",)) and agent_allowed("ops-2", ("ops-2",))
    assert not agent_allowed("ops.2", ("ops?2",)) and not agent_allowed("opsx2", ("ops.2",))


async def test_sandboxed_requesters_see_only_what_they_spawned(backend):
    async with engine_at(backend) as engine:
        await _world(engine)
        assert await keys_seen(engine, {"sessionKey": DM, "sandboxed": True}) == sorted(
            [DM, CHILD, GRANDCHILD, SPAWNED_ELSEWHERE])
    async with engine_at(backend, sandbox_session_tools_visibility="all") as engine:
        assert OTHER_AGENT in await keys_seen(engine, {"sessionKey": DM, "sandboxed": True})


async def test_a_sandbox_narrows_what_visibility_gives_and_never_widens_it(backend):
    async with engine_at(backend, visibility="self") as engine:
        await _world(engine)
        assert await keys_seen(engine, {"sessionKey": DM, "sandboxed": True}) == [DM]
        with pytest.raises(Forbidden):
            await engine.history(HistoryParams(sessionKey=CHILD, requester={"sessionKey": DM, "sandboxed": True}))
    async with engine_at(backend, visibility="agent") as engine:  # other agents stay out, spawned or not
        assert await keys_seen(engine, {"sessionKey": DM, "sandboxed": True}) == sorted([DM, CHILD, GRANDCHILD])
        listed = await engine.list_sessions(ListParams(requester={"sessionKey": DM, "sandboxed": True}))
        assert sorted(s["sessionKey"] for s in listed["sessions"]) == sorted([DM, CHILD, GRANDCHILD])


async def test_naming_an_agent_whose_only_spawned_session_is_hidden_is_forbidden(backend):
    async with engine_at(backend, agent_to_agent_enabled=False) as engine:
        await _world(engine)
        await engine.upsert_session(UpsertParams(sessionKey=SPAWNED_ELSEWHERE, incognito=True))
        with pytest.raises(Forbidden):  # the answer must not tell that a hidden spawned session is there
            await engine.search(SearchParams(query="shared", agentId="ops-2", requester={"sessionKey": DM}))
    async with engine_at(backend, visibility="agent") as engine:
        await engine.upsert_session(UpsertParams(sessionKey=SPAWNED_ELSEWHERE, incognito=False))
        with pytest.raises(Forbidden):  # `agent` reaches no other agent, not even what DM spawned there
            await engine.search(SearchParams(query="shared", agentId="ops-2", requester={"sessionKey": DM}))
        assert await keys_seen(engine, DM, agentId="main") == sorted([MAIN, DM, CHILD, GRANDCHILD])


async def test_incognito_sessions_are_never_searched_and_targeting_one_is_forbidden(backend):
    async with engine_at(backend) as engine:
        await _world(engine)
        with pytest.raises(Forbidden):
            await engine.search(SearchParams(query="shared", sessionKeys=[SECRET]))
        with pytest.raises(Forbidden):
            await engine.history(HistoryParams(sessionKey=SECRET))
        listed = [s["sessionKey"] for s in (await engine.list_sessions())["sessions"]]
        assert SECRET not in listed


async def test_a_denied_explicit_target_is_forbidden_not_a_partial_answer(backend):
    async with engine_at(backend, visibility="self") as engine:
        await _world(engine)
        with pytest.raises(Forbidden):
            await engine.search(SearchParams(query="shared", sessionKeys=[DM, MAIN], requester={"sessionKey": DM}))
        with pytest.raises(Forbidden):
            await engine.history(HistoryParams(sessionKey=MAIN, requester={"sessionKey": DM}))
        assert (await engine.history(HistoryParams(sessionKey=DM, requester={"sessionKey": DM})))["messages"]


async def test_visibility_is_applied_before_the_limit(backend):
    async with engine_at(backend, visibility="self") as engine:
        for n in range(30):  # 30 newer invisible hits would fill any limit applied first
            await engine.append(AppendParams(sessionKey=f"agent:main:noise{n}", events=chain(f"n{n}-", [("user", "needle")], ts=2_000_000_000_000)))
        await engine.append(AppendParams(sessionKey=DM, events=chain("mine", [("user", "needle")])))
        result = await engine.search(SearchParams(query="needle", limit=1, order="recent", requester={"sessionKey": DM}))
        assert [h["messageId"] for h in result["results"]] == ["mine1"] and "truncated" not in result


async def test_title_search_treats_punctuation_as_separators(backend):
    async with engine_at(backend) as engine:
        await engine.upsert_session(UpsertParams(sessionKey=MAIN, label="Per-session communication controls in UI"))
        await engine.upsert_session(UpsertParams(sessionKey=DM, displayName="Loan questions"))
        for query in ["per session communi", "PER—SESSION   COMMUNICATION", MAIN]:
            found = [s["sessionKey"] for s in (await engine.list_sessions(ListParams(search=query)))["sessions"]]
            assert found == [MAIN], query
        assert (await engine.list_sessions(ListParams(search="---")))["sessions"] == []
        assert (await engine.list_sessions(ListParams(search="session per")))["sessions"] == []


async def test_palette_leaves_out_ungrouped_spawned_incognito_and_archived(backend):
    async with engine_at(backend) as engine:
        await _world(engine)
        await engine.upsert_session(UpsertParams(sessionKey=GRANDCHILD, group="Research"))
        await engine.archive(SessionRef(sessionKey=OTHER_AGENT))
        found = await engine.search(SearchParams(query="shared word", limit=25, palette=True, match="prefix"))
        keys = sorted({h["sessionKey"] for h in found["results"]})
        assert keys == sorted([MAIN, DM, GRANDCHILD])
        listed = sorted(s["sessionKey"] for s in (await engine.list_sessions(ListParams(palette=True)))["sessions"])
        assert listed == sorted([MAIN, DM, GRANDCHILD])


async def test_sessions_list_orders_by_latest_activity_including_appends(backend):
    async with engine_at(backend) as engine, engine_at(backend) as other_process:
        for key in ("agent:main:a", "agent:main:b"):
            await engine.append(AppendParams(sessionKey=key, events=chain(key[-1], [("user", "first words")])))
            await asyncio.sleep(0.01)
        assert [s["sessionKey"] for s in (await engine.list_sessions())["sessions"]] == ["agent:main:b",
                                                                                          "agent:main:a"]
        await asyncio.sleep(0.01)
        await engine.append(AppendParams(sessionKey="agent:main:a", events=[msg("a9", "user", "later words", "a1")]))  # no metadata change
        listed = (await engine.list_sessions())["sessions"]
        assert [s["sessionKey"] for s in listed] == ["agent:main:a", "agent:main:b"]
        assert listed[0]["updatedAt"] > listed[1]["updatedAt"]
        await other_process.upsert_session(UpsertParams(sessionKey="agent:main:c", label="made elsewhere"))
        assert "agent:main:c" in [s["sessionKey"] for s in (await engine.list_sessions())["sessions"]]
