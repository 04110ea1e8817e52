"""`scope` on sessions.search and sessions.list (SPEC §4): each filter selects exactly its sessions,
the same in a search and in the roster, visibility first, no cap on how many sessions a scope
selects, and the roster paged to its end by cursor."""

from __future__ import annotations

import asyncio
import json

import pytest

from sessionsearch import InvalidRequest
from sessionsearch.protocol import AppendParams, ListParams, SearchParams, UpsertParams
from sessionsearch.search.scope import SessionScope, parse_scope, spawn_tree
from sessionsearch.store.base import SessionMeta
from sessionsearch.transcript.events import parse_event

from ..helpers import BASE_TS, chain, engine_at

A, B, SUB, SUBSUB = "agent:main:a", "agent:main:b", "agent:main:sub", "agent:main:subsub"
CRON, SYS, PLAIN, OPS = "agent:main:cron", "agent:main:sys", "agent:main:plain", "agent:ops:x"
ROSTER = {
    A: {"label": "Deploy Plan", "kind": "direct", "group": "ops"},
    B: {"label": "Team room", "kind": "group"},
    SUB: {"label": "Deploy helper", "kind": "subagent", "spawnedBy": A},
    SUBSUB: {"kind": "subagent", "spawnedBy": SUB, "group": "ops"},
    CRON: {"label": "Nightly", "kind": "cron"},
    SYS: {"kind": "system"},
    PLAIN: {"displayName": "Per-session communication controls"},
    OPS: {"label": "deploy PLAN", "kind": "direct"},
}


async def seeded(engine) -> None:
    for i, (key, fields) in enumerate(ROSTER.items()):
        await engine.append(AppendParams(sessionKey=key, events=chain(f"m{i}-", [("user", "marker words here")])))
        await engine.upsert_session(UpsertParams(sessionKey=key, **fields))


async def searched(engine, scope: dict, **body) -> list[str]:
    found = await engine.search(SearchParams(query="marker", scope=scope, limit=25, resultMode="sessions", **body))
    keys = sorted(r["sessionKey"] for r in found["results"])
    assert sorted(row["sessionKey"] for row in found["sessions"]) == keys  # the rows of the sessions hit
    return keys


async def listed(engine, scope: dict | None, **body) -> list[str]:
    keys, cursor = [], None
    while True:
        page = await engine.list_sessions(ListParams(scope=scope, cursor=cursor, limit=2, **body))
        keys += [s["sessionKey"] for s in page["sessions"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            return sorted(keys)


@pytest.mark.parametrize(("scope", "expected"), [
    ({}, sorted(ROSTER)),
    ({"agentIds": ["ops"]}, [OPS]),
    ({"agentIds": ["main", "ops"]}, sorted(ROSTER)),
    ({"agentIds": ["nobody"]}, []),
    ({"label": "DEPLOY plan"}, sorted([A, OPS])),
    ({"search": "per session communi"}, [PLAIN]),
    ({"search": "deploy"}, sorted([A, SUB, OPS])),
    ({"search": SYS}, [SYS]),  # a literal session key finds its own session
    ({"kinds": ["subagent", "cron"]}, sorted([SUB, SUBSUB, CRON])),
    ({"kinds": []}, []),
    ({"excludeSubagents": True}, sorted(set(ROSTER) - {SUB, SUBSUB})),
    ({"excludeCron": True, "excludeSystem": True}, sorted(set(ROSTER) - {CRON, SYS})),
    ({"group": "ops"}, sorted([A, SUBSUB])),
    ({"spawnedBy": A}, sorted([SUB, SUBSUB])),  # transitively
    ({"spawnedBy": SUB}, [SUBSUB]),
    ({"activeMinutes": 60}, sorted(ROSTER)),
    ({"palette": True}, sorted(set(ROSTER) - {SUB})),  # an ungrouped spawned one is left out
    ({"agentIds": ["main"], "kinds": ["direct", "subagent"], "group": "ops"}, sorted([A, SUBSUB])),
])
async def test_each_filter_selects_exactly_its_sessions_in_search_and_roster(backend, scope, expected):
    async with engine_at(backend) as engine:
        await seeded(engine)
        assert await searched(engine, scope) == expected
        assert await listed(engine, scope) == expected


def meta(key: str, updated_at: int = 0, **fields) -> SessionMeta:
    return SessionMeta(key, None, fields.get("label"), None, fields.get("spawned_by"), None, fields.get("kind"),
                       fields.get("group"), 0, None, updated_at)


def test_active_minutes_holds_the_last_activity_against_now():
    scope = parse_scope({"activeMinutes": 5})
    assert scope is not None
    now = 10 * 60_000
    assert scope.selects(meta(A, now - 5 * 60_000), now_ms=now, spawned=None, in_palette=True)
    assert not scope.selects(meta(A, now - 5 * 60_000 - 1), now_ms=now, spawned=None, in_palette=True)
    # the time read now wins over the catalog's copy
    assert scope.selects(meta(A, 0), now_ms=now, spawned=None, in_palette=True, updated_at=now)


def test_a_spawn_loop_ends_the_walk():
    sessions = {A: meta(A, spawned_by=B), B: meta(B, spawned_by=A), SUB: meta(SUB, spawned_by=B)}
    assert spawn_tree(A, sessions) == {B, SUB}
    assert SessionScope().selects(meta(A), now_ms=0, spawned=None, in_palette=False)


@pytest.mark.parametrize(("body", "field", "text"), [
    ({"scope": {"x": 1}}, "scope.x", "scope has unknown field 'x'"),
    ({"scope": {"kinds": ["direct", "robot"]}}, "scope.kinds", "scope.kinds has unknown kind 'robot'"),
    ({"scope": {"kinds": "cron"}}, "scope.kinds", "scope.kinds must be a list"),
    ({"scope": {"excludeCron": "yes"}}, "scope.excludeCron", "scope.excludeCron must be a boolean"),
    ({"scope": {"activeMinutes": 0}}, "scope.activeMinutes", "scope.activeMinutes must be a positive integer"),
    ({"scope": {"agentIds": ["no way"]}}, "scope.agentIds[0]", "scope.agentIds[0]"),
    ({"scope": {"label": 3}}, "scope.label", "scope.label must be a string"),
    ({"scope": []}, "scope", "scope must be an object"),
    ({"scope": {}, "agentId": "main"}, "scope", "scope cannot be combined with agentId or sessionKeys"),
    ({"scope": {}, "sessionKeys": [A]}, "scope", "scope cannot be combined with agentId or sessionKeys"),
])
def test_errors_name_the_field(body, field, text):
    with pytest.raises(InvalidRequest) as raised:
        SearchParams.of({"query": "x", **body})
    assert text in raised.value.message and raised.value.field == field
    if "sessionKeys" not in body:
        with pytest.raises(InvalidRequest) as raised:
            ListParams.of(body)
        assert text in raised.value.message and raised.value.field == field


@pytest.mark.parametrize("cursor", ["nope", "", 3, "12~", "x~agent:main:a", "12345678901234567~k"])
def test_a_bad_cursor_is_refused(cursor):
    with pytest.raises(InvalidRequest, match="cursor is not valid"):
        ListParams.of({"cursor": cursor})


async def test_visibility_first_a_sandboxed_scope_never_widens(backend):
    async with engine_at(backend) as engine:
        await seeded(engine)
        sandboxed = {"sessionKey": A, "sandboxed": True}
        seen = await searched(engine, {}, requester=sandboxed)
        assert seen == sorted([A, SUB, SUBSUB])
        assert await searched(engine, {"agentIds": ["main", "ops"]}, requester=sandboxed) == seen
        # a filter selecting most sessions (the store answers the few it leaves out) still sees only these
        assert await searched(engine, {"excludeCron": True}, requester=sandboxed) == seen
        assert await searched(engine, {"kinds": ["group", "cron", "system"]}, requester=sandboxed) == []
        assert await searched(engine, {"agentIds": ["ops"]}, requester=sandboxed) == []
        assert await listed(engine, {"agentIds": ["main", "ops"]}, requester=sandboxed) == seen


async def test_the_rows_of_a_scoped_answer_follow_its_hits(backend):
    async with engine_at(backend) as engine:
        await seeded(engine)
        found = await engine.search(SearchParams(query="marker", scope={"group": "ops"}, order="recent"))
        hit_keys = list(dict.fromkeys(h["sessionKey"] for h in found["results"]))
        assert [row["sessionKey"] for row in found["sessions"]] == hit_keys and sorted(hit_keys) == [A, SUBSUB]
        (row,) = [row for row in found["sessions"] if row["sessionKey"] == A]
        assert row["label"] == "Deploy Plan" and row["group"] == "ops" and row["kind"] == "direct"
        assert row["archived"] is False and row["updatedAt"] > 0
        batch = await engine.search(SearchParams(queries=["marker", "absent"], scope={"group": "ops"}))
        assert [len(s["sessions"]) for s in batch["states"]] == [2, 0]
        unscoped = await engine.search(SearchParams(query="marker"))
        assert "sessions" not in unscoped


async def test_ten_thousand_sessions_a_match_in_the_oldest_is_found(backend):
    many = 10_000
    async with engine_at(backend) as engine:
        oldest = "agent:main:s00000"
        await engine.upsert_session(UpsertParams(sessionKey=oldest, label="the oldest one"))
        await engine.append(AppendParams(sessionKey=oldest, events=chain("o", [("user", "needle in the oldest")])))
        await asyncio.sleep(0.01)  # its last activity strictly before every other's
        # the hay in bulk, as an import stores it (a transaction a thousand sessions; not indexed, so
        # the answer says indexing, and nothing but the needle can match anyway)
        store = await engine.store("main")
        for start in range(1, many, 1000):
            steps = [(f"agent:main:s{i:05d}", None, [parse_event(e, "e") for e in chain(
                f"m{i}-", [("user", "hay")], ts=BASE_TS + 1000)], f"w{i}", 1)
                for i in range(start, min(start + 1000, many))]
            assert not [r for r in await store.import_many(steps) if isinstance(r, Exception)]
        engine._meta_changed("main")  # as the importer tells it

        for scope in ({}, {"agentIds": ["main"]}, {"label": "THE OLDEST ONE"}, {"search": "oldest"}):
            found = await engine.search(SearchParams(query="needle", scope=scope))
            assert [h["sessionKey"] for h in found["results"]] == [oldest], scope
            assert [r["sessionKey"] for r in found["sessions"]] == [oldest]
        # the roster pages to its end (pages cut by the byte budget too), and holds every session once
        keys, cursor, pages = [], None, 0
        while True:
            page = await engine.list_sessions(ListParams(scope={"agentIds": ["main"]}, cursor=cursor, limit=1000))
            keys += [s["sessionKey"] for s in page["sessions"]]
            pages += 1
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert len(keys) == len(set(keys)) == many and pages >= 10
        assert oldest in keys


async def test_the_rows_keep_the_answer_within_its_byte_budget(backend):
    async with engine_at(backend) as engine:
        for i in range(25):
            key = f"agent:main:long{i:02d}"
            await engine.append(AppendParams(sessionKey=key, events=chain(f"m{i}-", [("user", "marker")])))
            await engine.upsert_session(UpsertParams(sessionKey=key, label="é" * 1000, displayName="ü" * 1000))
        found = await engine.search(SearchParams(query="marker", scope={}, limit=25))
        assert len(found["results"]) == 25 and 0 < len(found["sessions"]) < 25 and found["truncated"] is True
        assert len(json.dumps(found, ensure_ascii=False).encode()) <= engine.settings.search_response_max_bytes
        hit_keys = list(dict.fromkeys(h["sessionKey"] for h in found["results"]))
        assert [r["sessionKey"] for r in found["sessions"]] == hit_keys[:len(found["sessions"])]
