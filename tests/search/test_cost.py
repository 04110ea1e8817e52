"""What one request may cost (search/cost.py): words merged before any work, every legal query
answered whatever its number of words (tests/search/test_long_queries.py for long ones), and a
scoped token's requests held to their turns so the operator is never starved. The same on both
stores."""

from __future__ import annotations

import asyncio
import random

from sessionsearch import SearchTimeout
from sessionsearch.api.tools import run_tool
from sessionsearch.auth import OPERATOR, Caller
from sessionsearch.identity import Requester
from sessionsearch.protocol import AppendParams, SearchParams, parse_search

from ..helpers import chain, engine_at, ids

KEY = "agent:main:main"
SCOPED = Caller(Requester(KEY, False))
VOCAB = [f"w{i}" for i in range(400)]


async def _corpus(engine, messages: int = 250) -> None:
    rng = random.Random(7)
    texts = [("user" if i % 2 == 0 else "assistant", "loan " + " ".join(rng.choice(VOCAB) for _ in range(12)))
             for i in range(messages)]
    await engine.append(AppendParams(sessionKey=KEY, events=chain("m", texts), sessionId="s1"))


def test_repeated_words_are_merged_into_one_condition():
    req = parse_search({"query": "loan LOAN Loan " * 200 + "rate"})
    assert req.queries[0].words == ["loan", "rate"]


def test_a_prefix_query_keeps_its_last_word_last_when_merging():
    req = parse_search({"query": "rate loan rate loa", "match": "prefix"})
    assert req.queries[0].words == ["rate", "loan", "loa"]


async def test_a_repeated_word_finds_what_the_word_finds(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine, 20)
        once = await engine.search(SearchParams(query="loan", limit=25))
        assert ids(await engine.search(SearchParams(query="loan " * 682, limit=25))) == ids(once) != []


async def test_the_worst_legal_queries_all_answer(backend):
    """Fuzz-style: the longest, most repetitive and widest legal requests each answer (hits or none;
    the SPEC's timeout is a clear answer too), never INVALID_REQUEST or UNAVAILABLE."""
    rng = random.Random(11)
    widest = " ".join(rng.sample(VOCAB, 32))
    worst: list[dict] = [
        {"query": widest + " loan"},  # past the former cap of 32 terms
        {"query": "-".join(["loan"] * 800)},  # a long hyphenated word
        {"query": "東京" * 2000},  # a long CJK run
        {"queries": [" ".join(rng.sample(VOCAB, 9)) for _ in range(8)]},  # past the former request cap
        {"queries": [widest, widest, "loan"]},
        {"query": " ".join(rng.sample(VOCAB, 400)), "match": "prefix", "resultMode": "sessions"},
        {"query": widest},
        {"query": ("loan " * 819).strip()},  # 4,095 characters of one word
        {"query": "-".join(["loan"] * 32)},  # one word of 32 parts
        {"query": "東京" * 16 + "東"},  # a CJK run of 33 characters: 32 pairs
        {"query": widest, "match": "prefix", "order": "recent"},
        {"query": widest, "resultMode": "sessions"},
        {"queries": [" ".join(rng.sample(VOCAB, 8)) for _ in range(8)]},  # the widest batch
        {"queries": [widest] * 2},
        {"queries": [("w1 " * 1300).strip()] * 8},  # 8 x 3,900 characters of one word
    ]
    for _ in range(12):
        n = rng.randint(1, 90)
        words = " ".join(rng.choice(VOCAB[:28] + ["loan", "LOAN", "lóan", "w1-w2"]) for _ in range(n))
        worst.append({"query": words[:4096]})
    async with engine_at(backend) as engine:
        await _corpus(engine)
        for body in worst:
            try:
                answer = await engine.search(SearchParams.of(dict(body)))
            except SearchTimeout:  # the SPEC's timeout is a clear answer too
                continue
            states = answer["states"] if "queries" in body else [answer]
            assert all(isinstance(s["results"], list) for s in states), body


async def test_a_scoped_token_past_its_turns_waits_then_is_refused_and_the_operator_is_not(backend):
    async with engine_at(backend, credential_max_concurrent=2, credential_queue_wait_ms=50) as engine:
        await _corpus(engine, 4)
        release = asyncio.Event()
        held = 0

        async def hold() -> None:
            nonlocal held
            async with engine.gate.admit(SCOPED.requester):
                held += 1
                await release.wait()

        holders = [asyncio.create_task(hold()) for _ in range(2)]
        while held < 2:
            await asyncio.sleep(0)
        refused = await run_tool(engine, "sessions_search", {"query": "loan"}, SCOPED)
        assert refused["status"] == "error" and "credential_max_concurrent" in refused["error"]
        assert (await run_tool(engine, "sessions_search", {"query": "loan"}, OPERATOR))["results"]
        other = Caller(Requester("agent:main:other", False))
        assert "results" in await run_tool(engine, "sessions_search", {"query": "loan"}, other)
        release.set()
        await asyncio.gather(*holders)
        assert (await run_tool(engine, "sessions_search", {"query": "loan"}, SCOPED))["results"]


def test_scoped_tokens_together_never_hold_every_connection(tmp_path):
    from sessionsearch import Settings
    from sessionsearch.search.cost import CredentialGate

    pg = Settings(database_url="postgresql://x/y", database_pool_max_connections=2, credential_max_concurrent=4)
    assert (CredentialGate.from_settings(pg).max_concurrent, CredentialGate.from_settings(pg).shared) == (1, 1)
    sqlite = CredentialGate.from_settings(Settings(credential_max_concurrent=2, readers_per_agent=4))
    assert (sqlite.max_concurrent, sqlite.shared) == (2, 3)


async def test_many_scoped_tokens_together_wait_for_the_shared_turns_and_the_operator_does_not(backend):
    async with engine_at(backend, readers_per_agent=3, database_pool_max_connections=3,
                         credential_queue_wait_ms=50) as engine:
        await _corpus(engine, 4)
        release = asyncio.Event()
        held = 0

        async def hold(key: str) -> None:
            nonlocal held
            async with engine.gate.admit(Requester(key, False)):
                held += 1
                await release.wait()

        holders = [asyncio.create_task(hold(f"agent:main:t{i}")) for i in range(2)]
        while held < 2:
            await asyncio.sleep(0)
        third = Caller(Requester("agent:main:t3", False))
        refused = await run_tool(engine, "sessions_search", {"query": "loan"}, third)
        assert refused["status"] == "error" and "scoped tokens already have 2 requests running" in refused["error"]
        assert (await run_tool(engine, "sessions_search", {"query": "loan"}, OPERATOR))["results"]
        release.set()
        await asyncio.gather(*holders)
        assert (await run_tool(engine, "sessions_search", {"query": "loan"}, third))["results"]


async def test_a_scoped_tokens_search_has_its_own_time_budget_and_the_operators_keeps_the_whole(backend,
                                                                                                  monkeypatch):
    import sessionsearch.engine as engine_module

    budgets: list[int] = []
    original = engine_module.run_search

    async def spying(req, context, **kw):
        budgets.append(context.settings.search_time_limit_ms)
        return await original(req, context, **kw)

    monkeypatch.setattr(engine_module, "run_search", spying)
    async with engine_at(backend, credential_search_time_limit_ms=750, search_time_limit_ms=60_000) as engine:
        await _corpus(engine, 4)
        assert (await run_tool(engine, "sessions_search", {"query": "loan"}, OPERATOR))["results"]
        assert (await run_tool(engine, "sessions_search", {"query": "loan"}, SCOPED))["results"]
        assert budgets == [60_000, 750]
        engine.settings = engine.settings.replace(search_time_limit_ms=500)  # the smaller of the two holds
        await run_tool(engine, "sessions_search", {"query": "loan"}, SCOPED)
        assert budgets[-1] == 500
