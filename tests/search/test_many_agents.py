"""A search of every agent (no agentId) over many agents: its statements run a few agents at a time
(search_agents_concurrency), and its answer is exactly the merge of every agent's own full answer
by SPEC §4's ranking (BM25 per agent corpus, then newer first, then messageId; sessions mode: the
best hits' order, then sessionKey)."""

from __future__ import annotations

import asyncio
import random

import pytest

from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.search import execute
from sessionsearch.search.visits import bounded

from ..helpers import BASE_TS, engine_at, timed

AGENTS = [f"a{i:02d}" for i in range(30)]
WORDS = ["loan", "river", "stone", "maple", "copper", "lantern"]


async def _fill(engine) -> None:
    """30 agents, two sessions each, 6-9 messages a session drawn from a few shared words: every word
    is in many agents, each agent holds few enough hits that one answer of 25 is all of them."""
    rnd = random.Random(25)
    ts = BASE_TS
    for agent in AGENTS:
        for s in range(2):
            items = []
            for _ in range(rnd.randint(6, 9)):
                ts += rnd.randint(1, 3) * 1000  # every timestamp distinct
                # each word in about a fifth of the messages: its BM25 weight well above FTS5's floor
                words = [w for w in WORDS if rnd.random() < 0.2] * rnd.randint(1, 2) + ["filler"] * rnd.randint(1, 8)
                rnd.shuffle(words)
                items.append((rnd.choice(["user", "assistant"]), " ".join(words), ts))
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:s{s}", events=timed(f"{agent}s{s}m", items)))


def _message_key(order: str):
    if order == "recent":
        return lambda h: (-h["timestamp"], h["messageId"])
    return lambda h: (-h["score"], -h["timestamp"], h["messageId"])


def _session_key(order: str):
    message = _message_key(order)
    return lambda s: (*message(s["best"]), s["sessionKey"])


@pytest.mark.parametrize("batch", [4, 50])  # SQLite's agents per thread hop: several batches, or one
@pytest.mark.parametrize("order", ["relevance", "recent"])
async def test_all_agents_answer_is_the_merge_of_every_agents_full_answer(backend, order, batch, monkeypatch):
    monkeypatch.setattr(execute, "BATCH", batch)
    async with engine_at(backend, search_agents_concurrency=3) as engine:
        await _fill(engine)
        for query, match in [("loan", "exact"), ("river stone", "exact"), ("cop", "prefix"), ("maple la", "prefix")]:
            merged = []
            merged_sessions = []
            for agent in AGENTS:
                own = await engine.search(SearchParams(query=query, match=match, agentId=agent, order=order, limit=25))
                assert "truncated" not in own  # the agent's full answer
                merged += own["results"]
                own_sessions = await engine.search(SearchParams(query=query, match=match, agentId=agent, order=order, limit=25, resultMode="sessions"))
                assert "truncated" not in own_sessions
                merged_sessions += own_sessions["results"]
            assert len({h["sessionKey"].split(":")[1] for h in merged}) > 10, query  # the words overlap
            merged.sort(key=_message_key(order))
            merged_sessions.sort(key=_session_key(order))
            for limit in (1, 7, 25):
                every = await engine.search(SearchParams(query=query, match=match, order=order, limit=limit))
                assert every["results"] == merged[:limit], (query, limit)
                assert every.get("truncated", False) == (len(merged) > limit)
                sessions = await engine.search(SearchParams(query=query, match=match, order=order, limit=limit, resultMode="sessions"))
                assert sessions["results"] == merged_sessions[:limit], (query, limit)
                assert sessions.get("truncated", False) == (len(merged_sessions) > limit)


async def test_bounded_runs_at_most_limit_at_once_and_keeps_the_items_order():
    running = peak = 0

    async def each(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.001 * (i % 5))
        running -= 1
        return i * 10

    assert await bounded(each, list(range(40)), 4) == [i * 10 for i in range(40)]
    assert peak == 4
    peak = 0
    assert await bounded(each, [3], 4) == [30]
    assert await bounded(each, [], 4) == []


async def test_bounded_raises_the_first_failure_and_starts_nothing_after_it():
    started: list[int] = []
    finished: list[int] = []

    async def each(i: int) -> int:
        started.append(i)
        if i == 2:
            raise LookupError(i)
        await asyncio.sleep(0.01)
        finished.append(i)
        return i

    with pytest.raises(LookupError):
        await bounded(each, list(range(20)), 3)
    assert started == [0, 1, 2]  # the items left were never started
    assert finished == [0, 1]  # the ones running when it failed ran to their end
