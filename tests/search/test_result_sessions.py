"""`resultMode: "sessions"` (SPEC §4): the best hit of each session in scope, its hit count and label,
sessions ordered by their best hits, limit counted in sessions; and both filters over HTTP, on the
agent tool and on the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from dataclasses import replace

from sessionsearch.protocol import AppendParams, RotateParams, SearchParams, SessionRef, UpsertParams, parse_search
from sessionsearch.search.context import SearchContext
from sessionsearch.search.runner import search as run_search
from sessionsearch.search.vectors import Meaning, Vectors
from sessionsearch.store.sqlite import sessions as sessions_sql

from ..helpers import BASE_TS, chain, engine_at, ids, leaf, timed
from ..server import Server

A, B, C = "agent:main:a", "agent:main:b", "agent:main:c"


async def _three(engine) -> None:
    """a: three hits, its best the short one; b: one strong hit; c: two weak hits, the newest."""
    await engine.append(AppendParams(sessionKey=A, events=timed("a", [("user", "loan approved after a long review of the file", BASE_TS + 1),
                                        ("assistant", "loan", BASE_TS + 2),
                                        ("user", "loan paperwork and other papers to sign today", BASE_TS + 3),
                                        ("assistant", "nothing here", BASE_TS + 4)])))
    await engine.append(AppendParams(sessionKey=B, events=timed("b", [("user", "loan loan", BASE_TS + 10)])))
    await engine.append(AppendParams(sessionKey=C, events=timed("c", [("user", "a loan among many other words in a long message here", BASE_TS + 20),
                                        ("assistant", "and one more loan among many other words in a message",
                                         BASE_TS + 21)])))
    await engine.upsert_session(UpsertParams(sessionKey=B, label="Bank call"))


def _summary(result: dict) -> list[tuple]:
    return [(s["sessionKey"], s["hits"], s["best"]["messageId"]) for s in result["results"]]


async def test_each_session_comes_once_with_its_best_hit_and_hit_count_ordered_by_best(backend):
    async with engine_at(backend) as engine:
        await _three(engine)
        messages = await engine.search(SearchParams(query="loan", limit=25))
        result = await engine.search(SearchParams(query="loan", resultMode="sessions"))
        assert _summary(result) == [(B, 1, "b1"), (A, 3, "a2"), (C, 2, "c2")]
        # the order is that of the sessions' first hits in the messages order, the best hit that hit
        first_seen = list(dict.fromkeys(h["sessionKey"] for h in messages["results"]))
        assert [s["sessionKey"] for s in result["results"]] == first_seen
        by_id = {h["messageId"]: h for h in messages["results"]}
        for session in result["results"]:
            assert session["best"] == by_id[session["best"]["messageId"]]
            assert session["sessionId"] == session["best"]["sessionId"]
        assert [s["label"] for s in result["results"] if s["sessionKey"] == B] == ["Bank call"]
        assert [s["label"] for s in result["results"] if s["sessionKey"] == A] == [None]
        assert "truncated" not in result


async def test_limit_counts_sessions_and_truncated_says_more_sessions_matched(backend):
    async with engine_at(backend) as engine:
        await _three(engine)
        two = await engine.search(SearchParams(query="loan", resultMode="sessions", limit=2))
        assert len(two["results"]) == 2 and two["truncated"] is True
        three = await engine.search(SearchParams(query="loan", resultMode="sessions", limit=3))
        assert len(three["results"]) == 3 and "truncated" not in three
        assert [s["sessionKey"] for s in three["results"]][:2] == [s["sessionKey"] for s in two["results"]]


async def test_sessions_found_only_far_down_the_hits_are_reached_exactly(backend):
    """150 strong hits in one session come before any other session's: the top hits are taken
    again, more each time, until they hold one session past the limit (with postings too)."""
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=A, events=timed("a", [("user", "audit audit", BASE_TS + i) for i in range(150)])))
        await engine.append(AppendParams(sessionKey=B, events=timed("b", [("user", "audit of the accounts, a long look at them", BASE_TS + 500),
                                            ("user", "audit of the accounts, a longer look at all", BASE_TS + 1)])))
        await engine.append(AppendParams(sessionKey=C, events=timed("c", [("user", "audit of the accounts, a much longer look at them all",
                                             BASE_TS + 600)])))
        expected = [(A, 150, "a150"), (B, 2, "b1")]
        result = await engine.search(SearchParams(query="audit", resultMode="sessions", limit=2))
        assert _summary(result) == expected and result["truncated"] is True
        assert _summary(await engine.search(SearchParams(query="audit", resultMode="sessions", limit=3))) == \
            [*expected, (C, 1, "c1")]
        if backend.kind != "sqlite":  # postings are SQLite's
            return
        await engine.optimize(min_docs=50, min_share=0)
        await engine.search(SearchParams(query="audit"))  # the store learns which words have postings
        assert "audit" in (await engine.store("main"))._hot_seen[1]
        again = await engine.search(SearchParams(query="audit", resultMode="sessions", limit=2))
        assert _summary(again) == expected and again["truncated"] is True


async def test_recent_order_ranks_sessions_by_their_newest_hit(backend):
    async with engine_at(backend) as engine:
        await _three(engine)
        result = await engine.search(SearchParams(query="loan", resultMode="sessions", order="recent"))
        assert _summary(result) == [(C, 2, "c2"), (B, 1, "b1"), (A, 3, "a3")]


async def test_counts_and_best_hits_keep_to_the_range_and_the_role(backend):
    async with engine_at(backend) as engine:
        await _three(engine)
        ranged = await engine.search(SearchParams(query="loan", resultMode="sessions", since=BASE_TS + 3, until=BASE_TS + 21))
        assert sorted(_summary(ranged)) == [(A, 1, "a3"), (B, 1, "b1"), (C, 1, "c1")]
        users = await engine.search(SearchParams(query="loan", resultMode="sessions", role="assistant"))
        assert sorted(_summary(users)) == [(A, 1, "a2"), (C, 1, "c2")]
        assert (await engine.search(SearchParams(query="loan", resultMode="sessions", since=BASE_TS + 100)))["results"] == []


async def test_a_session_with_several_windows_is_one_result_counting_all_of_them(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=A, events=chain("old", [("user", "budget budget"), ("user", "budget later")]), sessionId="w1"))
        await engine.rotate(RotateParams(sessionKey=A, sessionId="w2"))
        await engine.append(AppendParams(sessionKey=A, events=chain("new", [("user", "budget again now")], ts=BASE_TS + 50), sessionId="w2"))
        result = await engine.search(SearchParams(query="budget", resultMode="sessions"))
        assert _summary(result) == [(A, 3, "old1")] and result["results"][0]["sessionId"] == "w1"
        narrowed = await engine.search(SearchParams(query="budget", resultMode="sessions", sessionId="w2"))
        assert _summary(narrowed) == [(A, 1, "new1")] and narrowed["results"][0]["sessionId"] == "w2"


async def test_sessions_the_requester_may_not_see_are_never_counted(backend):
    main, child, other, secret = "agent:main:main", "agent:main:subagent:c1", "agent:main:dm:x", "agent:main:incognito"
    async with engine_at(backend, visibility="tree") as engine:
        for n, key in enumerate([child, other, secret]):
            await engine.append(AppendParams(sessionKey=key, events=chain(f"k{n}-", [("user", "shared secret plan"), ("user", "shared plan")])))
        await engine.upsert_session(UpsertParams(sessionKey=child, spawnedBy="agent:main:dm:y", kind="subagent"))
        await engine.upsert_session(UpsertParams(sessionKey=secret, incognito=True))
        operator = await engine.search(SearchParams(query="shared plan", resultMode="sessions", limit=25))
        assert sorted(s["sessionKey"] for s in operator["results"]) == sorted([child, other])  # never incognito
        as_parent = await engine.search(SearchParams(query="shared plan", resultMode="sessions", limit=1, requester={"sessionKey": "agent:main:dm:y"}))
        assert _summary(as_parent) == [(child, 2, "k0-2")] and "truncated" not in as_parent
        assert (await engine.search(SearchParams(query="plan", resultMode="sessions", requester={"sessionKey": main})))["results"]


async def test_windows_needing_reconciliation_are_left_out_and_the_agent_is_warned(backend):
    async with engine_at(backend) as engine:
        await _three(engine)
        await engine.append(AppendParams(sessionKey="agent:main:imported", events=chain("i", [("user", "loan loan loan")])), index=False)
        result = await engine.search(SearchParams(query="loan", resultMode="sessions", limit=25), agent_facing=True)
        assert "agent:main:imported" not in {s["sessionKey"] for s in result["results"]}
        assert result["indexing"] is True and result["warning"].startswith("Transcript indexing is in progress")
        await engine.reconcile_pending()
        after = await engine.search(SearchParams(query="loan", resultMode="sessions", limit=25))
        assert ("agent:main:imported", 1, "i1") in _summary(after) and "indexing" not in after


async def test_a_window_needing_reconciliation_is_not_counted_beside_a_clean_one(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=A, events=chain("old", [("user", "budget old")]), sessionId="w1"))
        await engine.rotate(RotateParams(sessionKey=A, sessionId="w2"))
        await engine.append(AppendParams(sessionKey=A, events=chain("new", [("user", "budget new"), ("assistant", "budget more")]), sessionId="w2"))
        await engine.append(AppendParams(sessionKey=A, events=[leaf("l1", "new2", "new1")], sessionId="w2"))  # a rewind: w2 needs rebuilding
        result = await engine.search(SearchParams(query="budget", resultMode="sessions"))
        assert _summary(result) == [(A, 1, "old1")] and result["indexing"] is True


async def test_archived_sessions_are_counted_out_and_the_budget_holds(backend):
    async with engine_at(backend, search_response_max_bytes=2500) as engine:
        for n in range(8):
            await engine.append(AppendParams(sessionKey=f"agent:main:s{n}", events=chain(f"s{n}-", [("user", f"report {'x' * 250} {n}")])))
        await engine.append(AppendParams(sessionKey="agent:main:cold", events=chain("c", [("user", "report cold")])))
        await engine.archive(SessionRef(sessionKey="agent:main:cold"))
        result = await engine.search(SearchParams(query="report", resultMode="sessions", limit=25))
        assert len(json.dumps(result, ensure_ascii=False).encode()) <= 2500
        assert 0 < len(result["results"]) < 8 and result["truncated"] is True
        assert result["archivedTranscriptsExcluded"] == 1


async def test_each_query_of_a_batch_answers_in_sessions(backend):
    async with engine_at(backend) as engine:
        await _three(engine)
        states = (await engine.search(SearchParams(queries=["paperwork", "among"], resultMode="sessions")))["states"]
        assert [_summary(s) for s in states] == [[(A, 1, "a3")], [(C, 2, "c2")]]  # c's two tie: newest


async def test_cjk_substrings_group_by_session_too(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=A, events=chain("a", [("user", "東京開会"), ("user", "東京駅に")])))
        await engine.append(AppendParams(sessionKey=B, events=chain("b", [("user", "明日東京へ")])))
        result = await engine.search(SearchParams(query="東京", resultMode="sessions"))
        assert sorted((s["sessionKey"], s["hits"]) for s in result["results"]) == [(A, 2), (B, 1)]


def test_filters_and_sessions_mode_over_http_and_the_agent_tool(tmp_path):
    server = Server(tmp_path / "data", tmp_path / "server.log")
    try:
        for key, prefix, ts in ((A, "a", BASE_TS), (B, "b", BASE_TS + 86_400_000)):
            events = chain(prefix, [("user", "deploy the api"), ("assistant", "deploy done")], ts=ts)
            assert server.post("transcript.append", {"sessionKey": key, "events": events})[0] == 200
        status, body = server.post("sessions.search", {"query": "deploy", "since": "2026-01-03", "limit": 1})
        assert status == 200 and [h["sessionKey"] for h in body["results"]] == [B] and body["truncated"] is True
        status, body = server.post("sessions.search", {"query": "deploy", "until": BASE_TS + 86_400_000,
                                                       "resultMode": "sessions"})
        assert status == 200 and [(s["sessionKey"], s["hits"]) for s in body["results"]] == [(A, 2)]
        status, body = server.post("sessions.search", {"query": "deploy", "since": "last week"})
        assert status == 400 and body["error"]["code"] == "INVALID_REQUEST"
        assert body["error"]["message"].startswith("since must be epoch milliseconds or an ISO 8601 date or time")
        status, body = server.post("sessions.search", {"query": "deploy", "since": BASE_TS, "until": BASE_TS})
        assert status == 400 and body["error"]["message"] == "since must be earlier than until"
        status, body = server.request("POST", "/v1/tools/sessions_search",
                                      {"query": "deploy", "resultMode": "sessions", "since": "2026-01-02"})
        assert status == 200 and sorted((s["sessionKey"], s["hits"]) for s in body["results"]) == [(A, 2), (B, 2)]
        status, body = server.request("POST", "/v1/tools/sessions_search", {"query": "deploy", "until": "soon"})
        assert status == 200 and body["status"] == "error" and body["error"].startswith("until must be")
        status, document = server.get("/openapi.json")
        properties = document["paths"]["/v1/sessions.search"]["post"]["requestBody"]["content"][
            "application/json"]["schema"]["properties"]
        assert {"since", "until", "resultMode"} <= set(properties)
    finally:
        assert server.stop() == 0


def test_the_cli_takes_since_until_and_sessions(backend, tmp_path):
    async def seed():
        async with engine_at(backend) as engine:
            await engine.append(AppendParams(sessionKey=A, events=chain("a", [("user", "invoice sent"), ("user", "invoice paid")])))
            await engine.append(AppendParams(sessionKey=B, events=chain("b", [("user", "invoice late")], ts=BASE_TS + 86_400_000)))
            await engine.upsert_session(UpsertParams(sessionKey=B, label="Billing"))
    asyncio.run(seed())
    env = {**os.environ, **backend.env()}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sessionsearch.cli", "search", *args], capture_output=True,
                              text=True, env=env, timeout=60)

    ranged = cli("invoice", "--since", "2026-01-03", "--json")
    assert ranged.returncode == 0, ranged.stderr
    assert ids(json.loads(ranged.stdout)) == ["b1"]
    by_ms = cli("invoice", "--until", str(BASE_TS + 86_400_000), "--json")
    assert sorted(ids(json.loads(by_ms.stdout))) == ["a1", "a2"]
    sessions = cli("invoice", "--sessions", "--json")
    assert sorted((s["sessionKey"], s["hits"]) for s in json.loads(sessions.stdout)["results"]) == [(A, 2), (B, 1)]
    human = cli("invoice", "--sessions", "--recent")
    assert human.returncode == 0 and human.stdout.index(B) < human.stdout.index(A)
    assert '"Billing"' in human.stdout and "2 hit(s)" in human.stdout
    wrong = cli("invoice", "--since", "tomorrow")
    assert wrong.returncode == 2 and "since must be epoch milliseconds or an ISO 8601 date or time" in wrong.stderr


async def test_hit_counts_are_read_in_the_snapshot_the_best_hits_came_from(tmp_path):  # SQLite only: SQLite's snapshot is a transaction on its reader connection; PostgreSQL reads every search in one REPEATABLE READ snapshot
    """A window turning dirty between the ranking and the count once left a session listed with
    `hits: 0` beside its best hit: the rewind below lands right after the first statement that
    matches, on whatever reader the search holds."""
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey=A, events=chain("a", [("user", "budget one"), ("assistant", "budget two")])))
        await engine.append(AppendParams(sessionKey=B, events=chain("b", [("user", "budget six")])))
        store = await engine.store("main")
        await engine.search(SearchParams(query="budget"))  # the readers exist, and the store knows no window is dirty
        rewound = []

        def rewind_after_first_match(original):
            async def execute_fetchall(sql, *args, **kwargs):
                rows = await original(sql, *args, **kwargs)
                if "MATCH" in sql and not rewound:
                    rewound.append(sql)
                    await engine.append(AppendParams(sessionKey=A, events=[leaf("l1", "a2", "a1")]))  # a rewind: A's window needs rebuilding
                return rows
            return execute_fetchall

        for reader in store._all_readers:
            reader.conn.execute_fetchall = rewind_after_first_match(reader.conn.execute_fetchall)
        result = await engine.search(SearchParams(query="budget", resultMode="sessions"))
        assert rewound  # the window turned dirty while the search ran
        assert _summary(result) == [(A, 2, "a2"), (B, 1, "b1")]  # as if the search came just before it
        after = await engine.search(SearchParams(query="budget", resultMode="sessions"))
        assert _summary(after) == [(B, 1, "b1")] and after["indexing"] is True


async def test_counts_of_sessions_read_off_the_top_hits_are_read_in_their_snapshot_too(tmp_path):  # SQLite only: SQLite's snapshot is a transaction on its reader connection; PostgreSQL reads every search in one REPEATABLE READ snapshot
    """limit 1: the top 8 of 13 hits hold A's best, then B's, so the answer is read off them and
    only A's and B's matches are counted, in a second statement; A's window turning dirty between
    the two must not leave A counted at 0 (or missing)."""
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey=A, events=chain("a", [("user", "budget budget budget")]
                                     + [("user", "budget of the whole year and more words")] * 11)))
        await engine.append(AppendParams(sessionKey=B, events=chain("b", [("user", "budget budget")])))
        store = await engine.store("main")
        await engine.search(SearchParams(query="budget"))
        rewound = []

        def rewind_after_ranking(original):
            async def execute_fetchall(sql, *args, **kwargs):
                rows = await original(sql, *args, **kwargs)
                if "MATCH" in sql and not rewound:
                    rewound.append(sql)
                    await engine.append(AppendParams(sessionKey=A, events=[leaf("l1", "a2", "a1")]))
                return rows
            return execute_fetchall

        for reader in store._all_readers:
            reader.conn.execute_fetchall = rewind_after_ranking(reader.conn.execute_fetchall)
        result = await engine.search(SearchParams(query="budget", resultMode="sessions", limit=1))
        assert rewound
        assert _summary(result) == [(A, 12, "a1")] and result["truncated"] is True  # as just before the rewind
        after = await engine.search(SearchParams(query="budget", resultMode="sessions", limit=1))
        assert _summary(after) == [(B, 1, "b1")] and after["indexing"] is True


# few words, short texts and few timestamps: scores and timestamps tie often, so the tie rules count
VOCAB = ["alpha", "beta", "gamma", "delta", "alpha", "東京", "東京開会", "会議"]


async def _random_corpus(engine, rng: random.Random) -> list[str]:
    keys = [f"agent:{agent}:s{n}" for agent in ("main", "ops") for n in range(7)]
    for key in keys:
        for window in range(rng.choice([1, 1, 2, 3])):
            if window:
                await engine.rotate(RotateParams(sessionKey=key, sessionId=f"{key}-w{window}"))
            items = [(rng.choice(["user", "assistant"]), " ".join(rng.choices(VOCAB, k=rng.randint(1, 5))),
                      BASE_TS + rng.randint(0, 12)) for _ in range(rng.randint(1, 9))]
            await engine.append(AppendParams(sessionKey=key, events=timed(f"{key[-2:]}w{window}m", items), sessionId=f"{key}-w{window}"))
        if rng.random() < 0.3:
            await engine.upsert_session(UpsertParams(sessionKey=key, label=f"label {key[-2:]}"))
    return keys


async def _grouped_messages(engine, body: dict) -> tuple[list[dict], bool]:
    """The oracle: every hit in messages mode, in its order, grouped by session (the first hit of a
    session is its best), the limit applied to the sessions."""
    req = replace(parse_search({**body, "limit": 1}), limit=100_000, result_mode="messages")
    context = SearchContext(engine.settings, engine._catalog, engine.backend, engine, Meaning(Vectors()))
    answer = await run_search(req, context)
    assert "truncated" not in answer  # every hit came back
    sessions: dict[str, dict] = {}
    for hit in answer["results"]:
        if hit["sessionKey"] in sessions:
            sessions[hit["sessionKey"]]["hits"] += 1
        else:
            label = (await engine.catalog_view()).catalog.sessions[hit["sessionKey"]].label
            sessions[hit["sessionKey"]] = {"sessionKey": hit["sessionKey"], "sessionId": hit["sessionId"],
                                           "label": label, "hits": 1, "best": hit}
    grouped = list(sessions.values())
    return grouped[:body.get("limit", 10)], len(grouped) > body.get("limit", 10)


async def test_sessions_mode_equals_messages_mode_grouped_by_session_on_random_data(backend, monkeypatch):
    rng = random.Random(1315)
    paths = {"read_off": 0, "counted": 0, "aggregate": 0}  # how each agent's sessions were found

    def tally(name, original, path=None):
        async def wrapped(*args, **kwargs):
            result = await original(*args, **kwargs)
            paths[path or name] += 1 if path is None or result is not None else 0
            return result
        monkeypatch.setattr(sessions_sql, name, wrapped)

    tally("sessions_from_hits", sessions_sql.sessions_from_hits, "read_off")
    tally("count_sessions", sessions_sql.count_sessions, "counted")
    tally("top_sessions", sessions_sql.top_sessions, "aggregate")
    async with engine_at(backend, search_response_max_bytes=50_000_000) as engine:
        await _random_corpus(engine, rng)
        compared = nonempty = truncated = 0
        for _ in range(160):
            body = {"query": " ".join(rng.sample(["alpha", "beta", "gamma", "delta", "東京", "会議", "開会"],
                                                 rng.choice([1, 1, 2]))),
                    "limit": rng.randint(1, 8), "resultMode": "sessions"}
            if rng.random() < 0.5:
                body["order"] = "recent"
            if rng.random() < 0.3:
                body["role"] = rng.choice(["user", "assistant"])
            if rng.random() < 0.3:
                body["since"] = BASE_TS + rng.randint(0, 6)
                body["until"] = body["since"] + rng.randint(1, 8)
            if rng.random() < 0.2:
                body["agentId"] = rng.choice(["main", "ops"])
            # fewer top hits per session wanted: they settle fewer searches, the aggregate ranks the rest
            monkeypatch.setattr(sessions_sql, "HITS_PER_SESSION", rng.choice([1, 4, 4]))
            expected, more = await _grouped_messages(engine, body)
            result = await engine.search(SearchParams.of(body))
            assert result["results"] == expected, body
            assert result.get("truncated", False) is more, body
            compared += 1
            nonempty += bool(expected)
            truncated += more
        print(f"compared {compared} searches: {nonempty} found sessions, {truncated} truncated; per agent: "
              f"{paths['read_off'] - paths['counted']} read off the top hits with their counts, "
              f"{paths['counted']} read off them and counted, {paths['aggregate']} by the aggregate")
        assert nonempty > 100 and truncated > 30  # the data exercised what it was meant to
        if backend.kind == "sqlite":  # SQLite's three ways to the answer (PostgreSQL has one)
            assert paths["read_off"] - paths["counted"] > 20 and paths["counted"] > 20 and paths["aggregate"] > 20
