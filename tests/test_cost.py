"""What one request may cost (search/cost.py): words merged and capped before any work, PostgreSQL's
statement limits a clear 400, and a scoped token's requests held to their turns so the operator is
never starved. The same on both stores."""

from __future__ import annotations

import asyncio
import random

import pytest

from sessionsearch import InvalidRequest, SearchTimeout
from sessionsearch.api.tools import run_tool
from sessionsearch.auth import OPERATOR, Caller
from sessionsearch.search.query import Requester, parse_search

from .helpers import chain, engine_at, ids

KEY = "agent:main:main"
SCOPED = Caller(Requester(KEY, False))
VOCAB = [f"w{i}" for i in range(400)]
ALNUM = "abcdefghijklmnopqrstuvwxyz012345"


async def _corpus(engine, messages: int = 250) -> None:
    rng = random.Random(7)
    texts = [("user" if i % 2 == 0 else "assistant", "loan " + " ".join(rng.choice(VOCAB) for _ in range(12)))
             for i in range(messages)]
    await engine.append(KEY, chain("m", texts), sessionId="s1")


def test_repeated_words_are_merged_into_one_condition():
    req = parse_search({"query": "loan LOAN Loan " * 200 + "rate"})
    assert req.queries[0].words == ["loan", "rate"]


def test_a_prefix_query_keeps_its_last_word_last_when_merging():
    req = parse_search({"query": "rate loan rate loa", "match": "prefix"})
    assert req.queries[0].words == ["rate", "loan", "loa"]


async def test_a_repeated_word_finds_what_the_word_finds(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine, 20)
        once = await engine.search(query="loan", limit=25)
        assert ids(await engine.search(query="loan " * 682, limit=25)) == ids(once) != []


async def test_a_query_past_the_word_cap_is_refused_naming_the_setting(backend):
    async with engine_at(backend, search_max_query_words=5) as engine:
        await _corpus(engine, 4)
        assert "results" in await engine.search(query="loan w1 w2 w3 w4 loan w1")  # five distinct
        with pytest.raises(InvalidRequest) as err:
            await engine.search(query="loan w1 w2 w3 w4 w5")
        assert err.value.message == ("query holds 6 distinct words; at most 5 are allowed "
                                     "(setting search_max_query_words)")


async def test_a_batch_past_the_request_cap_is_refused_naming_the_setting(backend):
    async with engine_at(backend, search_max_request_words=6) as engine:
        await _corpus(engine, 4)
        await engine.search(queries=["loan w1 w2", "loan w3 w4", "w1 w2 w5"])  # six distinct in all
        with pytest.raises(InvalidRequest) as err:
            await engine.search(queries=["loan w1 w2", "loan w3 w4 w5", "w1 w2 w7"])
        assert "7 distinct words in all; at most 6" in err.value.message
        assert "search_max_request_words" in err.value.message


async def test_postgres_statement_limits_are_a_clear_400_not_unavailable(pg):
    async with engine_at(pg, search_max_query_words=5000, search_max_request_words=5000) as engine:
        await _corpus(engine, 20)
        with pytest.raises(InvalidRequest) as err:
            await engine.search(query=" ".join(a + b for a in ALNUM for b in ALNUM)[:4096])  # 1,024 words
        assert "more than PostgreSQL can run as one statement" in err.value.message


async def test_the_worst_legal_queries_answer_or_are_refused_clearly(backend):
    """Fuzz-style: the longest, most repetitive and widest requests the limits let through, and just
    past them, each answers hits or a clear INVALID_REQUEST naming a setting (never UNAVAILABLE)."""
    rng = random.Random(11)
    limit_words = 64
    widest = " ".join(rng.sample(VOCAB, limit_words))
    over = {"past the query cap": {"query": widest + " loan"},
            "past the request cap": {"queries": [" ".join(rng.sample(VOCAB, 20)) for _ in range(8)]}}
    worst: list[dict] = [
        {"query": widest},
        {"query": ("loan " * 819).strip()},  # 4,095 characters of one word
        {"query": "-".join(["loan"] * 800)},  # one word of 800 parts
        {"query": "東京" * 2000},  # a CJK run of 4,000 characters
        {"query": widest, "match": "prefix", "order": "recent"},
        {"query": widest, "resultMode": "sessions"},
        {"queries": [" ".join(rng.sample(VOCAB, 16)) for _ in range(8)]},  # the widest batch
        {"queries": [widest] * 8},  # the same 64 words eight times: 64 distinct in all
        {"queries": [("w1 " * 1300).strip()] * 8},  # 8 x 3,900 characters of one word
    ]
    for _ in range(12):
        n = rng.randint(1, 90)
        words = " ".join(rng.choice(VOCAB[:60] + ["loan", "LOAN", "lóan", "w1-w2"]) for _ in range(n))
        worst.append({"query": words[:4096]})
    async with engine_at(backend) as engine:
        await _corpus(engine)
        for body in over.values():
            with pytest.raises(InvalidRequest, match="setting search_max_(query|request)_words"):
                await engine.search(dict(body))
        for body in worst:
            try:
                answer = await engine.search(dict(body))
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


def test_on_postgres_a_token_may_never_hold_the_whole_pool(tmp_path):
    from sessionsearch import Settings
    from sessionsearch.search.cost import CredentialGate

    settings = Settings(database_url="postgresql://x/y", database_pool_max_connections=2, credential_max_concurrent=4)
    assert CredentialGate.from_settings(settings).max_concurrent == 1
    assert CredentialGate.from_settings(Settings(credential_max_concurrent=4)).max_concurrent == 4
