"""Every legal query is answered, whatever its number of words: a pasted paragraph, stack trace or
error message finds the message it was copied from, with the hits, scores and order of the plain
all-words query. On both stores, through the engine, the agent tool and HTTP."""

from __future__ import annotations

import math
import random
import sqlite3

import pytest

from sessionsearch import SearchTimeout, Settings
from sessionsearch.api.tools import run_tool
from sessionsearch.auth import OPERATOR
from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.search.query import parse_query
from sessionsearch.store.postgres import wide
from sessionsearch.store.sqlite.fts import fts5_match

from ..helpers import chain, engine_at, ids
from ..server import Server

KEY = "agent:main:main"
COMMON = [f"c{i}" for i in range(40)]  # each in most messages
RARE = [f"r{i}" for i in range(400)]  # each in a few
ALNUM = "abcdefghijklmnopqrstuvwxyz012345"


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(COMMON) if rng.random() < 0.8 else rng.choice(RARE) for _ in range(words))


def _paragraph(rng: random.Random, words: int) -> str:
    """A pasted paragraph of `words` words: mostly common, some rare, a hyphenated word and CJK."""
    return _text(rng, words - 2) + " per-session 東京大阪"


def _texts(rng: random.Random, pasted: list[str]) -> list[tuple[str, str]]:
    """200 messages of common and rare words (each fifth holding every common one), then the pasted
    ones (m201, m202, …)."""
    texts = [("user" if i % 2 == 0 else "assistant",
              _text(rng, rng.randint(20, 60)) + (" " + " ".join(COMMON) if i % 5 == 0 else ""))
             for i in range(200)]
    return texts + [("user", text) for text in pasted]


async def _corpus(engine, rng: random.Random, pasted: list[str]) -> list[tuple[str, str]]:
    texts = _texts(rng, pasted)
    await engine.append(AppendParams(sessionKey=KEY, events=chain("m", texts), sessionId="s1"))
    return texts


def _fts5_oracle(data_dir, query: str, limit: int = 25) -> list[tuple[str, float]]:
    """The plain all-words query on the agent's SQLite file: a MATCH of every quoted term, by bm25,
    then newer, then message id."""
    parsed = parse_query(query, prefix=False)
    assert parsed.match is not None
    path = next(data_dir.rglob("main.db"))
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT e.event_id, bm25(msg_fts) AS s FROM msg_fts JOIN events e ON e.id = msg_fts.rowid "
            "WHERE msg_fts MATCH ? ORDER BY s, e.ts DESC, e.event_id LIMIT ?", (fts5_match(parsed.match), limit)
        ).fetchall()
    return [(mid, score) for mid, score in rows]


async def test_an_800_word_query_and_a_batch_of_eight_answer_on_every_store(backend):
    rng = random.Random(1)
    pasted = [_paragraph(rng, 800) for _ in range(4)]
    async with engine_at(backend) as engine:
        await _corpus(engine, rng, pasted)
        found = await engine.search(SearchParams(query=pasted[0]))
        assert ids(found)[0] == "m201"
        nothing = _paragraph(rng, 799) + " r9999"
        assert ids(await engine.search(SearchParams(query=nothing))) == []
        batch = await engine.search(SearchParams(queries=pasted + [nothing] + pasted[:3]))
        assert [ids(state)[:1] for state in batch["states"]] == [["m201"], ["m202"], ["m203"], ["m204"], [],
                                                                ["m201"], ["m202"], ["m203"]]
        for body in ({"match": "prefix"}, {"order": "recent"}, {"resultMode": "sessions"}, {"role": "user"}):
            answer = await engine.search(SearchParams.of({"query": pasted[1], **body}))
            assert answer["results"] and answer["results"][0]["sessionKey"] == KEY, body


async def test_a_pasted_60_word_paragraph_finds_the_message_it_came_from_first(backend):
    rng = random.Random(2)
    pasted = [_paragraph(rng, 60) for _ in range(3)]
    async with engine_at(backend) as engine:
        await _corpus(engine, rng, pasted)
        for i, text in enumerate(pasted):
            assert ids(await engine.search(SearchParams(query=text)))[0] == f"m{201 + i}"


async def test_a_long_querys_hits_and_scores_are_the_plain_all_words_querys(backend, tmp_path):
    """SQLite: the engine's answer is FTS5's MATCH of every quoted term on the file. PostgreSQL: the
    same corpus and query give the same message ids and scores as on SQLite (its wide path)."""
    rng = random.Random(3)
    pasted = [_paragraph(rng, 300) for _ in range(3)]
    queries = [" ".join(rng.sample(COMMON, 36)), _text(rng, 120) + " per-session", pasted[0]]
    async with engine_at(backend) as engine:
        texts = await _corpus(engine, rng, pasted)
        answers = [await engine.search(SearchParams(query=q, limit=25)) for q in queries]
    sqlite_dir = backend.data_dir
    if backend.database_url:  # the same messages in a SQLite store, whose file answers the plain query
        sqlite_dir = tmp_path / "oracle"
        async with engine_at(sqlite_dir) as oracle_engine:
            await oracle_engine.append(AppendParams(sessionKey=KEY, events=chain("m", texts), sessionId="s1"))
    assert any(len(a["results"]) > 3 for a in answers)  # the common words' query finds many
    for query, answer in zip(queries, answers, strict=True):
        oracle = _fts5_oracle(sqlite_dir, query)
        assert [(h["messageId"], h["score"]) for h in answer["results"]] == [
            (mid, round(-score, 6)) for mid, score in oracle], query[:60]


async def test_postgres_scores_a_wide_query_as_its_one_statement_does(pg, monkeypatch):
    """The wide path (store/postgres/wide.py) against search.py's statement, to the last bit: every
    order, result mode, a prefix and a hyphenated word."""
    rng = random.Random(4)
    pasted = [_paragraph(rng, 200) for _ in range(3)]
    query = " ".join(rng.sample(COMMON, 34)) + " per-session"
    bodies = [{"query": query}, {"query": query, "order": "recent"}, {"query": query, "resultMode": "sessions"},
              {"query": query + " c1", "match": "prefix"}, {"query": pasted[0], "role": "user"},
              {"query": query, "resultMode": "sessions", "order": "recent"}]
    async with engine_at(pg) as engine:
        await _corpus(engine, rng, pasted)
        await engine.append(AppendParams(sessionKey=KEY, events=chain("x", [("user", query.replace("per-session", "per session"))]), sessionId="s2"))
        wide_answers = [await engine.search(SearchParams.of({**dict(body), "limit": 25})) for body in bodies]
        monkeypatch.setattr(wide, "WIDE_PHRASES", 10_000)
        one_statement = [await engine.search(SearchParams.of({**dict(body), "limit": 25})) for body in bodies]
    assert wide_answers == one_statement
    assert len(wide_answers[0]["results"]) >= 3


async def test_a_query_past_one_postgres_statement_is_answered_on_every_store(backend):
    """1,024 distinct words: more phrases than one PostgreSQL statement may hold columns for."""
    async with engine_at(backend) as engine:
        words = [a + b for a in ALNUM for b in ALNUM]
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", " ".join(words)), ("user", "aa ab")]), sessionId="s1"))
        assert ids(await engine.search(SearchParams(query=" ".join(words)[:4096]))) == ["m1"]
        assert ids(await engine.search(SearchParams(query=" ".join(words)[:4096] + "x", match="prefix"))) == []
        batch = await engine.search(SearchParams(queries=[" ".join(words[::-1])[:4096]] * 8, limit=1))
        assert ids(batch["states"][7]) == ["m1"]


async def test_the_agent_tool_passes_a_long_query_through(backend):
    rng = random.Random(5)
    pasted = [_paragraph(rng, 800)]
    async with engine_at(backend) as engine:
        await _corpus(engine, rng, pasted)
        answer = await run_tool(engine, "sessions_search", {"query": pasted[0]}, OPERATOR)
        assert [h["messageId"] for h in answer["results"]][:1] == ["m201"]


async def test_http_answers_an_800_word_query_and_a_batch_of_eight(backend):
    rng = random.Random(6)
    pasted = [_paragraph(rng, 800) for _ in range(8)]
    async with engine_at(backend) as engine:
        await _corpus(engine, rng, pasted)
    env = {k: v for k, v in backend.env().items() if k != "SESSIONSEARCH_DATA_DIR"}
    web = Server(backend.data_dir, backend / "web.log", **env)
    try:
        status, body = web.post("sessions.search", {"query": pasted[0]})
        assert (status, ids(body)[:1]) == (200, ["m201"]), body
        status, body = web.post("sessions.search", {"queries": pasted})
        assert status == 200, body
        assert [ids(state)[:1] for state in body["states"]] == [[f"m{201 + i}"] for i in range(8)]
    finally:
        assert web.stop() == 0


def test_the_removed_term_caps_still_load_and_are_ignored_with_a_warning(tmp_path, caplog):
    config = tmp_path / "config.toml"
    config.write_text("[search]\nmaxQueryTerms = 32\nmaxRequestTerms = 64\n")
    settings = Settings.load(config=str(config), env={"SESSIONSEARCH_SEARCH_MAX_QUERY_TERMS": "8"},
                             search_max_request_terms=10)
    assert not hasattr(settings, "search_max_query_terms")
    warnings = [r.getMessage() for r in caplog.records if "settings.deprecated" in r.getMessage()]
    assert len(warnings) == 4, caplog.text
    assert all("ignored" in line for line in warnings)


async def test_a_long_query_over_several_agents_ranks_them_together(backend):
    """Every agent searched on its own (no bound or one-statement search of them all for a query of
    many words on PostgreSQL), their hits merged as a short query's are."""
    rng = random.Random(7)
    pasted = [_paragraph(rng, 200) for _ in range(2)]
    query = " ".join(rng.sample(COMMON, 36))
    async with engine_at(backend) as engine:
        for agent in ("main", "ops", "dev"):
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=chain("m", _texts(rng, pasted)), sessionId=f"s-{agent}"))
        every = await engine.search(SearchParams(query=query, limit=25))
        alone = {agent: await engine.search(SearchParams(query=query, agentId=agent, limit=25)) for agent in ("main", "ops", "dev")}
        merged = sorted((h for a in alone.values() for h in a["results"]),
                        key=lambda h: (-h["score"], -h["timestamp"], h["messageId"]))
        assert {h["sessionKey"] for h in every["results"]} == {"agent:main:main", "agent:ops:main", "agent:dev:main"}
        assert [h["score"] for h in every["results"]] == [h["score"] for h in merged[:25]]
        assert ids(await engine.search(SearchParams(query=pasted[1], order="recent")))[:3] == ["m202"] * 3


async def test_postgres_scoring_of_many_matches_stops_at_the_time_budget(pg, monkeypatch):
    """The wide path's scoring in Python is held to the search's deadline, as its statements are."""
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", " ".join(COMMON))] * 300), sessionId="s1"))
        query = " ".join(COMMON[:36])
        assert len((await engine.search(SearchParams(query=query)))["results"]) == 10
        monkeypatch.setattr(wide, "monotonic", lambda: math.inf)  # past any deadline once rows are scored
        with pytest.raises(SearchTimeout):
            await engine.search(SearchParams(query=query))
        assert (await engine.search(SearchParams(query=" ".join(COMMON[:32]))))["results"]  # 32 words: one statement


async def test_a_long_query_over_more_agents_than_twice_the_limit_finds_the_best_of_them(backend):
    """Past 2 x limit agents a search by relevance visits them best first by score bounds (SQLite)
    or searches each (PostgreSQL, a query of many words): the same top hits either way."""
    rng = random.Random(8)
    query = " ".join(COMMON[:36])
    agents = [f"a{i}" for i in range(24)]
    async with engine_at(backend) as engine:
        for n, agent in enumerate(agents):
            texts = [("user", _text(rng, 30) + (" " + " ".join(COMMON) + " pad" * n if i == 0 else ""))
                     for i in range(4)]
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=chain("m", texts), sessionId=f"s-{agent}"))
        every = await engine.search(SearchParams(query=query, limit=5))
        alone = [h for agent in agents for h in (await engine.search(SearchParams(query=query, agentId=agent)))["results"]]
        best = sorted(alone, key=lambda h: (-h["score"], -h["timestamp"], h["sessionKey"]))[:5]
        assert len(best) == 5
        assert [(h["sessionKey"], h["score"]) for h in every["results"]] == [(h["sessionKey"], h["score"])
                                                                            for h in best]
