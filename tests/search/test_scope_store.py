"""`scope` as the stores run it (SQL over their sessions tables, store/roster.py): activity read
fresh after an append, the Unicode rules SQL only narrows kept exact, the list's order and cursor
the same on both stores (code point order of keys, ties by key), and the spawn tree across agents."""

from __future__ import annotations

import json
import time

from sessionsearch.importer import BATCH_EVENTS, run_import
from sessionsearch.protocol import AppendParams, ListParams, SearchParams, SessionRef, UpsertParams

from ..helpers import chain, engine_at, header, msg
from .test_scope import listed, searched

A, B, C = "agent:main:a", "agent:main:b", "agent:main:c"
HOUR_MS = 3_600_000


async def set_activity(engine, agent: str, key: str, at_ms: int) -> None:
    """Move a session's metadata and window times back to `at_ms`, as if nothing touched it since."""
    store = await engine.store(agent)
    pg = type(store).__name__.startswith("Pg")
    for table in ("ss_sessions", "ss_windows") if pg else ("sessions", "windows"):
        await store.execute_write(f"UPDATE {table} SET updated_at = {int(at_ms)} WHERE session_key = '{key}'")
    engine._meta_changed(agent)  # the catalog reads the rows again, with the old times


async def test_active_minutes_holds_an_append_made_a_moment_ago(backend):
    async with engine_at(backend) as engine:
        for i, key in enumerate((A, B)):
            await engine.append(AppendParams(sessionKey=key, events=chain(f"m{i}-", [("user", "marker words")])))
        long_ago = int(time.time() * 1000) - 3 * HOUR_MS
        for key in (A, B):
            await set_activity(engine, "main", key, long_ago)
        assert await searched(engine, {"activeMinutes": 60}) == []  # the catalog holds both, untouched for 3 h
        assert await searched(engine, {"activeMinutes": 240}) == [A, B]
        # an append into the window the catalog holds: the catalog's copy of A's updatedAt lags it
        await engine.append(AppendParams(sessionKey=A, events=[msg("m0-9", "user", "marker again", "m0-1")]))
        assert await searched(engine, {"activeMinutes": 60}) == [A]
        assert await listed(engine, {"activeMinutes": 60}) == [A]
        page = await engine.list_sessions(ListParams(scope={}, limit=1))
        assert [s["sessionKey"] for s in page["sessions"]] == [A] and page["sessions"][0]["updatedAt"] > long_ago


async def test_unicode_titles_and_labels_match_exactly(backend):
    titles = {A: "Straße Café crème", B: "100% done_now", C: "Plain ascii"}
    async with engine_at(backend) as engine:
        for i, (key, label) in enumerate(titles.items()):
            await engine.append(AppendParams(sessionKey=key, events=chain(f"m{i}-", [("user", "marker")])))
            await engine.upsert_session(UpsertParams(sessionKey=key, label=label))
        for scope, expected in [
            ({"label": "STRASSE CAFÉ CRÈME"}, [A]),  # casefold: ß is ss, which lower() would not give
            ({"label": "plain ASCII"}, [C]),
            ({"label": "plain"}, []),
            ({"search": "CAFE creme"}, [A]),  # diacritics removed, the last word a prefix
            ({"search": "strasse"}, []),  # a title word is folded as the tokenizer folds it, not casefolded
            ({"search": "straße ca"}, [A]),
            ({"search": "100% done"}, [B]),  # punctuation separates words
            ({"search": "100 done now"}, [B]),
            ({"search": "%"}, []),  # no words: nothing, and never a wildcard
            ({"search": "_"}, []),
            ({"search": "done_"}, [B]),
            ({"search": "ascii plain"}, []),  # in sequence
            ({"search": "agent:main:_"}, []),  # a key is literal
            ({"search": f"  {B}  "}, [B]),
        ]:
            assert await searched(engine, scope) == expected, scope
            assert await listed(engine, scope) == expected, scope


async def test_the_list_pages_in_code_point_order_through_ties(backend):
    keys = ["agent:main:Zed", "agent:main:a", "agent:main:a_b", "agent:main:aXb", "agent:main:é", "agent:main:z"]
    async with engine_at(backend) as engine:
        for i, key in enumerate(keys):
            await engine.append(AppendParams(sessionKey=key, events=chain(f"m{i}-", [("user", "marker")])))
        same = int(time.time() * 1000) - HOUR_MS
        for key in keys:
            await set_activity(engine, "main", key, same)
        seen, cursor = [], None
        while True:
            page = await engine.list_sessions(ListParams(scope={"activeMinutes": 120}, cursor=cursor, limit=1))
            seen += [(s["sessionKey"], s["updatedAt"]) for s in page["sessions"]]
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert seen == [(key, same) for key in sorted(keys)]


async def test_spawned_by_follows_the_tree_across_agents(backend):
    tree = {"agent:ops:child": A, "agent:main:grandchild": "agent:ops:child", "agent:ops:great": "agent:main:grandchild"}
    async with engine_at(backend) as engine:
        for i, key in enumerate([A, *tree]):
            await engine.append(AppendParams(sessionKey=key, events=chain(f"m{i}-", [("user", "marker")])))
        for key, parent in tree.items():
            await engine.upsert_session(UpsertParams(sessionKey=key, spawnedBy=parent))
        assert await searched(engine, {"spawnedBy": A}) == sorted(tree)
        assert await listed(engine, {"spawnedBy": A, "agentIds": ["ops"]}) == ["agent:ops:child", "agent:ops:great"]
        assert await listed(engine, {"spawnedBy": "agent:ops:child"}) == ["agent:main:grandchild", "agent:ops:great"]


async def test_a_scope_of_most_sessions_leaves_out_incognito_and_counts_archived(backend):
    keys = [f"agent:main:s{i}" for i in range(8)]
    async with engine_at(backend) as engine:
        for i, key in enumerate(keys):
            await engine.append(AppendParams(sessionKey=key, events=chain(f"m{i}-", [("user", "marker")])))
        await engine.upsert_session(UpsertParams(sessionKey=keys[0], incognito=True))
        await engine.upsert_session(UpsertParams(sessionKey=keys[1], kind="cron"))
        await engine.archive(SessionRef(sessionKey=keys[2]))
        found = await engine.search(SearchParams(query="marker", scope={"excludeCron": True}, limit=25))
        assert sorted(h["sessionKey"] for h in found["results"]) == keys[3:]
        assert found["archivedTranscriptsExcluded"] == 1
        found = await engine.search(SearchParams(query="marker", scope={"kinds": ["cron"]}, limit=25))
        assert [h["sessionKey"] for h in found["results"]] == [keys[1]] and "archivedTranscriptsExcluded" not in found


async def test_the_catalog_in_memory_selects_as_the_stores_do(backend, monkeypatch):
    """Past plan.ROSTER_SQL_AGENTS agents a database per agent selects from the catalog: the same sessions."""
    from sessionsearch.search import plan

    from .test_scope import ROSTER, seeded

    scopes = [{"label": "DEPLOY plan"}, {"search": "per session communi"}, {"kinds": ["subagent", "cron"]},
              {"excludeSubagents": True}, {"group": "ops"}, {"spawnedBy": A}, {"palette": True},
              {"agentIds": ["main"], "excludeCron": True}]
    async with engine_at(backend) as engine:
        await seeded(engine)
        by_store = [await searched(engine, scope) for scope in scopes]
        monkeypatch.setattr(plan, "ROSTER_SQL_AGENTS", 0)
        assert [await searched(engine, scope) for scope in scopes] == by_store
        sandboxed = {"sessionKey": A, "sandboxed": True}
        assert await searched(engine, {"excludeCron": True}, requester=sandboxed) == sorted(
            k for k in ROSTER if k in (A, "agent:main:sub", "agent:main:subsub"))


async def test_an_imported_session_is_active_when_sessions_json_says(backend, tmp_path):
    """SPEC §4 activeMinutes: an imported session's activity is sessions.json's `updatedAt`, in
    chunks and all (a long transcript is imported in several), not the time of the import; a live
    append after it is activity again."""
    now = int(time.time() * 1000)
    folder = tmp_path / "state" / "agents" / "main" / "sessions"
    folder.mkdir(parents=True)
    long_ago, recently = now - 3 * HOUR_MS, now - 10 * 60_000
    index = {A: {"sessionId": "wa", "updatedAt": long_ago}, B: {"sessionId": "wb", "updatedAt": recently}}
    for key, entry in index.items():
        sid = entry["sessionId"]
        count = BATCH_EVENTS + 10 if key == A else 3  # A's in two chunks, the second without its metadata
        events = chain(f"{sid}-", [("user", f"marker {n}") for n in range(count)])
        (folder / f"{sid}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [header(sid), *events]))
    (folder / "sessions.json").write_text(json.dumps(index))
    async with engine_at(backend) as engine:
        await run_import(engine, tmp_path / "state")
        page = await engine.list_sessions(ListParams(scope={}))
        assert {s["sessionKey"]: s["updatedAt"] for s in page["sessions"]} == {A: long_ago, B: recently}
        assert await listed(engine, {"activeMinutes": 60}) == [B]
        await engine.reconcile_pending()
        assert await searched(engine, {"activeMinutes": 60}) == [B]
        assert await searched(engine, {"activeMinutes": 240}) == [A, B]
        await engine.append(AppendParams(sessionKey=A, events=[msg("live", "user", "marker live", f"wa-{BATCH_EVENTS + 10}")]))
        assert await listed(engine, {"activeMinutes": 60}) == [A, B]
