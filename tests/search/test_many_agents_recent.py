"""`order: "recent"` over many agents visits them newest first and stops once the hits in hand are
newer than every agent not visited (search/visits.py, newest_first): the answer is still exactly
the merge of every agent's full answer, ties at the cut included, and what it passes over still
counts (windows needing reconciliation, metadata changes, messages appended since)."""

from __future__ import annotations

import os
import time

import pytest

from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.search import visits

from ..helpers import BASE_TS, engine_at, msg, timed

AGENTS = [f"r{i:02d}" for i in range(24)]


def _recent(h):
    return (-h["timestamp"], h["messageId"])


async def _merged(engine, query: str, *, match: str = "exact", sessions: bool = False) -> list[dict]:
    merged = []
    for agent in engine.agent_ids_on_disk():
        body = {"query": query, "match": match, "agentId": agent, "order": "recent", "limit": 25}
        if sessions:
            body["resultMode"] = "sessions"
        own = await engine.search(SearchParams.of(body))
        assert "truncated" not in own  # the agent's full answer
        merged += own["results"]
    merged.sort(key=(lambda s: (*_recent(s["best"]), s["sessionKey"])) if sessions else _recent)
    return merged


def _count_searches(stores) -> list[str]:
    """The agents whose store is searched from now on, one entry a statement."""
    seen: list[str] = []

    def counted(original, agent: str):
        def call(*args, **kwargs):
            seen.append(agent)
            return original(*args, **kwargs)
        return call

    for store in stores:
        for name in ("search_top", "search_sessions"):
            setattr(store, name, counted(getattr(store, name), store.agent_id))
    return seen


@pytest.mark.parametrize("concurrency", [1, 3])
@pytest.mark.parametrize("ids", ["rising", "falling"])
async def test_recent_over_agents_with_tied_timestamps_is_the_merge_of_their_full_answers(backend, concurrency, ids):
    async with engine_at(backend, search_agents_concurrency=concurrency) as engine:
        # agent i's messages at BASE_TS + (i // 3) * 10 s + j s: three agents share every timestamp,
        # so the cut at any limit runs through ties that only messageId orders, the agent visited
        # last among equals holding the first of them (ids falling) or the first one (rising)
        for i, agent in enumerate(AGENTS):
            base = BASE_TS + (i // 3) * 10_000
            items = [("user" if j % 2 else "assistant", "tide " + "pool " * (j % 3), base + j * 1000)
                     for j in range(4)]
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"m{i if ids == 'rising' else 99 - i:02d}x", items)))
        for query, match in [("tide", "exact"), ("pool", "exact"), ("ti", "prefix")]:
            merged = await _merged(engine, query, match=match)
            merged_sessions = await _merged(engine, query, match=match, sessions=True)
            for limit in (1, 2, 3, 5, 7, 12, 25):
                every = await engine.search(SearchParams(query=query, match=match, order="recent", limit=limit))
                assert every["results"] == merged[:limit], (query, limit)
                assert every.get("truncated", False) == (len(merged) > limit)
                sessions = await engine.search(SearchParams(query=query, match=match, order="recent", limit=limit, resultMode="sessions"))
                assert sessions["results"] == merged_sessions[:limit], (query, limit)
                assert sessions.get("truncated", False) == (len(merged_sessions) > limit)


async def test_recent_over_agents_stops_at_the_agents_that_settle_the_answer(backend):
    async with engine_at(backend, search_agents_concurrency=2) as engine:
        for i, agent in enumerate(AGENTS):  # agent i's messages all newer than agent i - 1's
            items = [("user", f"harbor note {j}", BASE_TS + i * 100_000 + j * 1000) for j in range(3)]
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"{agent}m", items)))
        seen = _count_searches([await engine.store(a) for a in AGENTS])
        every = await engine.search(SearchParams(query="harbor", order="recent", limit=4))
        assert [h["messageId"] for h in every["results"]] == ["r23m3", "r23m2", "r23m1", "r22m3"]
        assert every["truncated"] is True
        # the newest two agents hold the 5 hits the answer needs; a third may have started beside them
        assert {"r23", "r22"} <= set(seen) and len(seen) <= 3, seen
        seen.clear()
        relevance = await engine.search(SearchParams(query="harbor", limit=4))  # relevance reads every agent
        # (on PostgreSQL in one statement of them all, no store's own search: search_many.py)
        assert len(relevance["results"]) == 4 and sorted(seen) == (AGENTS if backend.kind == "sqlite" else [])


@pytest.mark.parametrize("quiet", [0, 8])  # 8 newer agents without the word: past VISITS_ALONE, the rest at once
async def test_an_agent_passed_over_still_reports_its_windows_needing_reconciliation(backend, quiet):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:old:imported", events=timed("o", [("user", "beacon", BASE_TS)])), index=False)
        await engine.append(AppendParams(sessionKey="agent:old:main", events=timed("om", [("user", "other words", BASE_TS)])))  # clean, older
        for agent in ("new1", "new2"):
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"{agent}m", [("user", "beacon", BASE_TS + 50_000)])))
        for i in range(quiet):
            await engine.append(AppendParams(sessionKey=f"agent:q{i}:main", events=timed(f"q{i}m", [("user", "other words", BASE_TS + 90_000)])))
        answer = await engine.search(SearchParams(query="beacon", order="recent", limit=1))
        assert [h["messageId"] for h in answer["results"]] == ["new1m1"]
        assert answer["indexing"] is True  # old's window in scope was never read, yet it is reported
        assert (await engine.pending())["old"]  # and queued for it (no queue here: reconciled on demand)


async def test_a_message_appended_to_a_quiet_agent_is_found_by_the_next_recent_search(backend):
    async with engine_at(backend, search_agents_concurrency=1) as engine:
        for i, agent in enumerate(AGENTS[:6]):
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"{agent}m", [("user", "ember", BASE_TS + i * 1000)])))
        if backend.kind == "sqlite":  # files quiet for a while: their Newest is answered from memory
            past = time.time_ns() - 10 * 10**9
            for agent in AGENTS[:6]:
                for suffix in ("", "-wal"):
                    os.utime(backend.data_dir / "agents" / f"{agent}.db{suffix}", ns=(past, past))
        first = await engine.search(SearchParams(query="ember", order="recent", limit=1))
        assert [h["messageId"] for h in first["results"]] == ["r05m1"]
        assert (await engine.search(SearchParams(query="ember", order="recent", limit=1))) == first  # kept, same answer
        # the oldest agent gets the newest message; nothing else moved
        appended = await engine.append(AppendParams(sessionKey="agent:r00:main", events=[msg("late1", "user", "ember", "r00m1", ts=BASE_TS + 99_000)]))
        assert appended["indexed"] == 1
        after = await engine.search(SearchParams(query="ember", order="recent", limit=1))
        assert [h["messageId"] for h in after["results"]] == ["late1"]


async def test_a_word_only_old_agents_hold_is_found_past_the_agents_searched_one_by_one(backend):
    many = [f"w{i:02d}" for i in range(40)]  # more than visits.VISITS_ALONE
    async with engine_at(backend, search_agents_concurrency=2) as engine:
        for i, agent in enumerate(many):  # every agent newer than the one before; the word in the oldest six,
            # two by two at the same timestamps
            items = [("user", "plain words", BASE_TS + 1_000_000 + i * 1000)]
            if i < 6:
                items += [("assistant", "fossil " * (1 + j), BASE_TS + (i // 2) * 1000 + j) for j in range(3)]
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"f{99 - i}x", items)))
        seen = _count_searches([await engine.store(a) for a in many])
        merged = await _merged(engine, "fossil")
        assert len(merged) == 18
        seen.clear()
        for limit in (1, 2, 3, 5, 17, 25):
            every = await engine.search(SearchParams(query="fossil", order="recent", limit=limit))
            assert every["results"] == merged[:limit], limit
            assert every.get("truncated", False) == (len(merged) > limit)
        # on PostgreSQL the agents past the first VISITS_ALONE are searched together, in one statement
        assert len(seen) == 6 * (40 if backend.kind == "sqlite" else visits.VISITS_ALONE), len(seen)


async def test_a_time_range_passes_over_the_agents_without_a_message_in_it(backend):
    async with engine_at(backend, search_agents_concurrency=1) as engine:
        for i, agent in enumerate(AGENTS):  # agent i's three messages at BASE_TS + i * 10 s + 0, 1, 2 s
            items = [("user", f"comet {j}", BASE_TS + i * 10_000 + j * 1000) for j in range(3)]
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"{agent}m", items)))
        seen = _count_searches([await engine.store(a) for a in AGENTS])
        merged = await _merged(engine, "comet")
        for since, until in [(BASE_TS + 50_000, BASE_TS + 81_000), (BASE_TS + 201_000, None), (None, BASE_TS + 31_000),
                             (BASE_TS + 10_500, BASE_TS + 10_900)]:
            in_range = [h for h in merged if (since is None or h["timestamp"] >= since)
                        and (until is None or h["timestamp"] < until)]
            for limit in (1, 4, 25):
                seen.clear()
                body = {"query": "comet", "order": "recent", "limit": limit,
                        **({"since": since} if since is not None else {}), **({"until": until} if until else {})}
                every = await engine.search(SearchParams.of(body))
                assert every["results"] == in_range[:limit], (since, until, limit)
                assert every.get("truncated", False) == (len(in_range) > limit)
                if since is not None:  # the agents older than the range are never searched
                    assert all(int(a[1:]) * 10_000 + 2000 >= since - BASE_TS for a in seen), (since, seen)
