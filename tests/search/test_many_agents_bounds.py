"""Score bounds (store/sqlite/bounds.py, store/postgres/bounds.py): a search of many agents by
relevance visits them best first and passes over those that cannot hold a top hit (search/visits.py,
best_first), and its answer stays exactly the merge of every agent's own full answer (SPEC §4)."""

from __future__ import annotations

import asyncio
import math
import random
import sqlite3

import pytest

from sessionsearch.protocol import AppendParams, SearchParams, SessionRef
from sessionsearch.search import visits
from sessionsearch.search.query import parse_query
from sessionsearch.store.postgres import bounds as pg_bounds
from sessionsearch.store.postgres.backend import PgBackend
from sessionsearch.store.sqlite import SqliteBackend
from sessionsearch.store.sqlite import bounds as bounds_mod
from sessionsearch.store.sqlite.store import SqliteAgentStore
from sessionsearch.worker.optimize import build

from ..helpers import BASE_TS, engine_at, msg, timed, wait_until
from .test_many_agents import AGENTS, WORDS, _fill, _message_key

# texts whose words repeat within a row, vary in length, and need unicode61's folding and the CJK scheme
VOCAB = ["loan", "loans", "loaner", "river", "Café", "CAFE", "naïve", "per-session", "東京", "会議", "東京会議",
         "x1", "rate", "rates", "the", "a"]
QUERIES = [("loan", False), ("loa", True), ("cafe", False), ("café", True), ("naive", False), ("per-session", False),
           ("session per", False), ("東京", False), ("議", False), ("river loan", False), ("river lo", True),
           ("rat", True), ("the", False), ("x", True), ("absent", False), ("loan absent", False)]


def _corpus(rnd: random.Random, n: int) -> list[str]:
    return [" ".join(rnd.choices(VOCAB, k=rnd.randint(1, 12)) * rnd.randint(1, 3)) for _ in range(n)]


def _unkept(store) -> None:
    """A store whose writes did not keep its bounds (as one written before they did)."""
    with sqlite3.connect(store.path) as db:
        db.execute("DELETE FROM meta WHERE key IN ('bounds_rows', 'bounds_tokens')")


async def _fold_all(engine, agents) -> None:
    """Each agent's bounds folded, unless its writes kept them (SQLite: from its first row on)."""
    for agent in agents:
        folded = await (await engine.store(agent)).fold_bounds()
        assert folded.get("terms", 0) > 0 or isinstance(engine.backend, SqliteBackend)


@pytest.mark.parametrize("added", [0, 1, 12, 80])
async def test_an_agents_bound_is_never_below_the_score_of_any_of_its_rows(backend, added):
    """`added`: rows appended to every agent after the fold, one append each (the writer keeps
    the bounds: they stay known)."""
    rnd = random.Random(7)
    async with engine_at(backend) as engine:
        for a in range(6):
            texts = _corpus(rnd, rnd.choice([3, 40, 200]))
            await engine.append(AppendParams(sessionKey=f"agent:b{a}:main", events=timed(f"b{a}m", [("user", t, BASE_TS + i) for i, t in enumerate(texts)])))
        agents = [f"b{a}" for a in range(6)]
        await _fold_all(engine, agents)
        for a in range(6):
            for i, t in enumerate(_corpus(rnd, added)):  # one append each, as a gateway streams them
                await engine.append(AppendParams(sessionKey=f"agent:b{a}:late", events=[msg(f"b{a}n{i}", "user", t, f"b{a}n{i - 1}" if i else None,
                                                             ts=BASE_TS + 999 + i)]))
        stores = [await engine.store(a) for a in agents]
        for word, prefix in QUERIES:
            match = parse_query(word, prefix=prefix).match
            found = await engine.backend.score_bounds(stores, match, math.inf)
            assert found is not None
            for store, bound in zip(stores, found, strict=True):
                async with store.reader() as reader:
                    top = await store.search_top(reader, match, k=10_000, order="relevance", include=None,
                                                 exclude=[], role=None)
                scores = [-h.score for h in top.hits if h.row_id]
                if word != "absent" and not (prefix and backend.kind == "postgres"):
                    assert bound.bound < math.inf, (word, store.agent_id)  # kept by every write
                if not scores:
                    continue  # a bound may or may not see that nothing matches
                assert bound.bound > -math.inf, (word, store.agent_id)
                assert bound.bound >= max(scores), (word, store.agent_id, bound.bound, max(scores))
                # and worth having (as folded: rows added since loosen a small agent's document counts)
                if (bound.bound < math.inf and not added and len(match.words) == 1 and not prefix and word.isalnum()
                        and word.isascii()):
                    assert bound.bound <= 2.2 * max(scores), (word, bound.bound, max(scores))


async def test_a_written_agent_stays_bounded_and_one_not_kept_is_unknown_until_a_fold(backend, monkeypatch):
    fold_after = bounds_mod if backend.kind == "sqlite" else pg_bounds
    monkeypatch.setattr(fold_after, "FOLD_AFTER", 0)  # due at once after a fold, however long it took
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:c0:main", events=timed("c0m", [("user", "loan river", BASE_TS)])))
        store = await engine.store("c0")
        match = parse_query("loan", prefix=False).match
        absent = parse_query("zephyr", prefix=False).match
        assert 0 < (await engine.backend.score_bounds([store], match, math.inf))[0].bound < math.inf
        assert (await engine.backend.score_bounds([store], absent, math.inf))[0].bound == -math.inf
        await engine.append(AppendParams(sessionKey="agent:c0:main", events=[msg("c0n1", "user", "zephyr", "c0m1", ts=BASE_TS + 1)]))
        assert -math.inf < (await engine.backend.score_bounds([store], absent, math.inf))[0].bound < math.inf
        assert await engine.postings_due() == {}  # kept by the writes: no fold due
        await _not_kept(engine, store)
        unknown = await engine.backend.score_bounds([store], absent, math.inf)  # PostgreSQL: most agents
        assert unknown is None or unknown[0].bound == math.inf  # unfolded, no bounds at all
        assert await engine.postings_due() == {"c0": "bounds"}
        await store.fold_bounds()
        assert -math.inf < (await engine.backend.score_bounds([store], absent, math.inf))[0].bound < math.inf
        assert await engine.postings_due() == {}


async def _not_kept(engine, store) -> None:
    """The store as one written before writes kept its bounds."""
    if isinstance(engine.backend, SqliteBackend):
        _unkept(store)
    else:
        await engine.backend.db.tx(lambda conn: conn.execute(
            "DELETE FROM ss_bounds_built WHERE ano = (SELECT ano FROM ss_agents WHERE agent_id = %s)", (store.agent_id,)))


@pytest.mark.parametrize("folded", ["every", "half", "every, then written"])
async def test_all_agents_answer_with_bounds_is_the_merge_of_every_agents_full_answer(backend, folded,
                                                                                      monkeypatch):
    async with engine_at(backend, search_agents_concurrency=3) as engine:
        await _fill(engine)
        await _fold_all(engine, AGENTS if folded != "half" else AGENTS[::2])
        if folded == "every, then written":  # rows added since the folds (SQLite: in the bounds' logs)
            rnd = random.Random(26)
            for n, agent in enumerate(AGENTS[::3]):
                words = [w for w in WORDS if rnd.random() < 0.4] * rnd.randint(1, 3) + ["filler"] * rnd.randint(0, 2)
                await engine.append(AppendParams(sessionKey=f"agent:{agent}:late", events=[msg(f"{agent}late", "user", " ".join(words), None,
                                                                ts=BASE_TS + 10**7 + n)]))
        order = "relevance"
        for query, match in [("loan", "exact"), ("river stone", "exact"), ("cop", "prefix"), ("maple la", "prefix"),
                             ("filler", "exact"), ("fil", "prefix")]:
            merged = []
            for agent in AGENTS:
                own = await engine.search(SearchParams(query=query, match=match, agentId=agent, order=order, limit=25))
                merged += own["results"]
            merged.sort(key=_message_key(order))
            for limit in (1, 7, 25):
                every = await engine.search(SearchParams(query=query, match=match, order=order, limit=limit))
                # a word in every row scores at FTS5's IDF floor: the rounded scores tie where the
                # exact ones do not, so the merge by rounded score is no oracle for it
                if query not in ("filler", "fil"):
                    assert every["results"] == merged[:limit], (query, limit)
                    assert every.get("truncated", False) == (len(merged) > limit)
                with monkeypatch.context() as m:  # every agent visited, as without bounds
                    m.setattr(type(engine.backend), "score_bounds", _no_bounds)
                    assert (await engine.search(SearchParams(query=query, match=match, order=order, limit=limit))) == every


async def _no_bounds(self, stores, match, deadline):
    return None


def _count_visits(monkeypatch, kind: str) -> list[str]:
    """The agents each search statement reads hits of (SQLite: one a statement; PostgreSQL: a
    statement of many), appended to the list returned."""
    visited: list[str] = []
    if kind == "sqlite":
        direct = SqliteAgentStore.search_top_direct

        def counted(self, *args, **kwargs):
            visited.append(self.agent_id)
            return direct(self, *args, **kwargs)

        monkeypatch.setattr(SqliteAgentStore, "search_top_direct", counted)
    else:
        many = PgBackend.search_top_many

        async def counted_many(self, stores, *args, **kwargs):
            visited.extend(s.agent_id for s in stores)
            return await many(self, stores, *args, **kwargs)

        monkeypatch.setattr(PgBackend, "search_top_many", counted_many)
    return visited


async def test_a_search_visits_only_the_agents_that_may_hold_a_top_hit(backend, monkeypatch):
    visited = _count_visits(monkeypatch, backend.kind)
    async with engine_at(backend) as engine:
        for a in range(40):  # "common" in every row; the shorter an agent's rows, the better they score
            rows = [("user", " ".join(["common"] + ["pad"] * (a + i)), BASE_TS + 100 * a + i) for i in range(3)]
            if a in (5, 30):
                rows.append(("assistant", "rare words here", BASE_TS + 100 * a + 50))
            await engine.append(AppendParams(sessionKey=f"agent:d{a:02d}:main", events=timed(f"d{a}m", rows)))
        agents = [f"d{a:02d}" for a in range(40)]
        await _fold_all(engine, agents)
        visited.clear()
        found = await engine.search(SearchParams(query="rare", limit=5))
        assert {h["sessionKey"] for h in found["results"]} == {"agent:d05:main", "agent:d30:main"}
        assert sorted(visited) == ["d05", "d30"]  # the others hold no "rare"
        visited.clear()
        found = await engine.search(SearchParams(query="common", limit=2))
        # d01's row of two words ties d00's and is newer
        assert [h["messageId"] for h in found["results"]] == ["d0m1", "d1m1"]
        assert len(visited) < 20, visited  # the best agents first; the rest cannot beat them
        # an append leaves that agent's bound unknown: it is visited, and its new best row found
        await engine.append(AppendParams(sessionKey="agent:d39:main", events=[msg("d39n", "user", "common", "d39m3", ts=BASE_TS + 99_999)]))
        visited.clear()
        found = await engine.search(SearchParams(query="common", limit=2))
        assert found["results"][0]["sessionKey"] == "agent:d39:main"
        assert "d39" in visited and len(visited) < 20


async def test_the_worker_check_folds_the_bounds_of_agents_whose_writes_did_not_keep_them(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:e0:main", events=timed("e0m", [("user", "loan river", BASE_TS)])))
        await engine.append(AppendParams(sessionKey="agent:e1:main", events=timed("e1m", [("user", "loan", BASE_TS)])))
        assert await engine.postings_due() == {}
        for agent in ("e0", "e1"):
            await _not_kept(engine, await engine.store(agent))
        due = await engine.postings_due()
        settings = engine.settings
    assert due == {"e0": "bounds", "e1": "bounds"}
    done = await asyncio.to_thread(build, settings, due, "normal")
    assert {a: d["bounds"]["terms"] for a, d in done["agents"].items()} == {"e0": 2, "e1": 1}
    async with engine_at(backend) as engine:
        assert await engine.postings_due() == {}


def test_an_agent_past_max_rows_is_not_folded(tmp_path, monkeypatch):
    import sqlite3

    path = tmp_path / "a.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIRTUAL TABLE msg_fts USING fts5 (text, ts UNINDEXED, mid UNINDEXED, "
                 "tokenize = 'unicode61 remove_diacritics 2')")
    conn.execute("CREATE TABLE bounds_state (id INTEGER PRIMARY KEY, structure BLOB, averages BLOB, "
                 "folded_at REAL, fold_s REAL)")
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
    conn.executemany("INSERT INTO msg_fts (text) VALUES (?)", [("loan",)] * 5)
    conn.commit()
    conn.close()
    assert bounds_mod.read_bounds(path, max_rows=4) is None
    folded = bounds_mod.read_bounds(path, max_rows=5)
    assert folded is not None and folded.terms == [("loan", 5, 1, 1)]


async def test_a_postgres_agent_past_max_rows_is_not_folded_and_a_prefix_is_one_range(pg):
    async with engine_at(pg) as engine:
        # lexemes on either side of the prefix's range, by code point
        texts = ["loan", "cop", "copω", "copper", "coq", "co", "copé", "coп"]
        await engine.append(AppendParams(sessionKey="agent:g0:main", events=timed("g0m", [("user", t, BASE_TS + i) for i, t in enumerate(texts)])))
        store = await engine.store("g0")
        assert await pg_bounds.fold(store.db, store.ano, max_rows=6) == {}
        assert await engine.backend.score_bounds([store], parse_query("loan", prefix=False).match, math.inf) is None
        assert (await pg_bounds.fold(store.db, store.ano, max_rows=8))["terms"] == 8
        async with store.db.reader() as reader:
            ranged = await reader.all("SELECT term FROM ss_term_bounds WHERE ano = %s AND term >= 'cop' "
                                      "AND term < %s ORDER BY term", (store.ano, pg_bounds.prefix_end("cop")))
            begun = await reader.all("SELECT term FROM ss_term_bounds WHERE ano = %s AND starts_with(term, 'cop') "
                                     "ORDER BY term", (store.ano,), last=True)
        assert ranged == begun and len(begun) == 4, begun  # cop, cope, copper, copω
        for word, prefix in [("cop", True), ("co", True), ("copp", True), ("coq", False), ("cox", True)]:
            match = parse_query(word, prefix=prefix).match
            bound = (await engine.backend.score_bounds([store], match, math.inf))[0].bound
            async with store.reader() as reader:
                top = await store.search_top(reader, match, k=100, order="relevance", include=None, exclude=[],
                                             role=None)
            scores = [-h.score for h in top.hits if h.row_id]
            assert (bound == -math.inf) == (not scores), word
            assert not scores or max(scores) <= bound < math.inf, word
    assert pg_bounds.prefix_end("ab") == "ac" and pg_bounds.prefix_end("a\U0010ffff") == "b"
    assert pg_bounds.prefix_end("\U0010ffff") is None and pg_bounds.prefix_end("a\ud7ff") == "a\ue000"


async def test_bounds_of_unchanged_agents_are_not_read_again_and_a_write_is_seen(tmp_path, monkeypatch):
    import sessionsearch.store.sqlite.search as sqlite_store

    monkeypatch.setattr(sqlite_store, "QUIET_S", 0.05)  # files quiet 50 ms after their last write
    reads: list[str] = []
    direct = SqliteAgentStore.score_bound_direct

    def counted(self, *args, **kwargs):
        reads.append(self.agent_id)
        return direct(self, *args, **kwargs)

    monkeypatch.setattr(SqliteAgentStore, "score_bound_direct", counted)
    async with engine_at(tmp_path) as engine:
        for a in range(6):
            await engine.append(AppendParams(sessionKey=f"agent:f{a}:main", events=timed(f"f{a}m", [("user", "loan river", BASE_TS + a)])))
        await _fold_all(engine, [f"f{a}" for a in range(6)])
        await asyncio.sleep(0.2)
        first = await engine.search(SearchParams(query="loan", limit=3))
        assert sorted(reads) == [f"f{a}" for a in range(6)]
        reads.clear()
        assert await engine.search(SearchParams(query="loan", limit=3)) == first
        assert reads == []  # every agent's files unchanged: its rows for "loan" kept
        await engine.search(SearchParams(query="river", limit=3))
        assert len(reads) == 6  # a term not read yet
        reads.clear()
        await engine.append(AppendParams(sessionKey="agent:f2:main", events=[msg("f2n", "user", "loan loan", "f2m1", ts=BASE_TS + 100)]))
        found = await engine.search(SearchParams(query="loan", limit=3))
        assert reads == ["f2"]  # only the agent written since
        assert found["results"][0]["messageId"] == "f2n"


def test_serve_folds_the_bounds_and_answers_every_agent_as_the_merge_of_each(tmp_path):
    """As a user runs it: `serve` (embedded) takes appends over HTTP, its postings check folds the
    bounds of the agents whose writes did not keep them (half, as stores written before they did)
    in a child process, and a search of every agent answers as the merge of each."""
    import json

    from ..server import Server

    server = Server(tmp_path / "data", tmp_path / "serve.log", SESSIONSEARCH_POSTINGS_CHECK_EVERY_S="0.2")
    try:
        rnd = random.Random(3)
        agents = [f"g{a}" for a in range(12)]
        for a, agent in enumerate(agents):
            # each word in about a fifth of the rows: its IDF well above FTS5's floor, where rounded scores tie
            texts = [" ".join([w for w in ("loan", "river", "stone") if rnd.random() < 0.2] * rnd.randint(1, 2)
                              + ["pad"] * rnd.randint(1, 6)) for _ in range(8)]
            status, body = server.post("transcript.append", {"sessionKey": f"agent:{agent}:main", "events": timed(
                f"{agent}m", [("user", t, BASE_TS + 10 * a + i) for i, t in enumerate(texts)])})
            assert status == 200, body
        for agent in agents[::2]:
            with sqlite3.connect(next((tmp_path / "data").rglob(f"{agent}.db"))) as db:
                db.execute("DELETE FROM meta WHERE key IN ('bounds_rows', 'bounds_tokens')")

        def folded() -> set[str]:
            return {agent for line in server.log_path.read_text().splitlines() if "optimize.done" in line
                    for agent in [json.loads(line)["agent"]] if json.loads(line).get("bound_terms")}

        wait_until(lambda: folded() == set(agents[::2]), 60, lambda: f"those not kept folded: {folded()}", every=0.1)
        for query in ["loan", "river stone", "sto"]:
            merged = []
            for agent in agents:
                status, own = server.post("sessions.search", {"query": query, "agentId": agent, "limit": 25,
                                                              "match": "prefix"})
                assert status == 200, own
                merged += own["results"]
            merged.sort(key=_message_key("relevance"))
            status, every = server.post("sessions.search", {"query": query, "limit": 5, "match": "prefix"})
            assert status == 200 and every["results"] == merged[:5], query
    finally:
        server.stop()


async def test_recent_passes_over_the_agents_kept_bounds_say_match_nothing(tmp_path, monkeypatch):
    import sessionsearch.store.sqlite.search as sqlite_store

    monkeypatch.setattr(sqlite_store, "QUIET_S", 0.05)
    visited: list[str] = []
    top = SqliteAgentStore.search_top

    async def counted(self, *args, **kwargs):
        visited.append(self.agent_id)
        return await top(self, *args, **kwargs)

    monkeypatch.setattr(SqliteAgentStore, "search_top", counted)
    async with engine_at(tmp_path) as engine:
        for a in range(20):  # the newest agents hold no "rare": by recent, they would be visited first
            rows = [("user", "pad words", BASE_TS + 1000 * a)]
            if a in (2, 4):
                rows.append(("assistant", "a rare word", BASE_TS + 1000 * a + 1))
            await engine.append(AppendParams(sessionKey=f"agent:h{a:02d}:main", events=timed(f"h{a}m", rows)))
        await _fold_all(engine, [f"h{a:02d}" for a in range(20)])
        await asyncio.sleep(0.2)
        before = await engine.search(SearchParams(query="rare", order="recent", limit=5))  # nothing kept yet: agents visited
        await engine.search(SearchParams(query="rare", limit=5))  # by relevance: every agent's bound read, and kept
        visited.clear()
        after = await engine.search(SearchParams(query="rare", order="recent", limit=5))
        assert after == before and [h["messageId"] for h in after["results"]] == ["h4m2", "h2m2"]
        # the newest few visited alone (visits.VISITS_ALONE), then only the agents that may match
        assert sorted(visited) == sorted(["h02", "h04"] + [f"h{a}" for a in range(19, 19 - visits.VISITS_ALONE, -1)])
        await engine.append(AppendParams(sessionKey="agent:h19:main", events=[msg("h19n", "user", "rare too", "h19m1", ts=BASE_TS + 99_000)]))
        found = await engine.search(SearchParams(query="rare", order="recent", limit=5))  # h19 written since: visited
        assert [h["messageId"] for h in found["results"]] == ["h19n", "h4m2", "h2m2"]


async def test_a_deletion_keeps_the_bounds_with_the_document_counts_left(tmp_path):
    loan = parse_query("loan", prefix=False).match
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:c0:main", events=timed("c0m", [("user", "loan river", BASE_TS)])))
        await engine.append(AppendParams(sessionKey="agent:c0:other", events=timed("c0o", [("user", "loan stone", BASE_TS + 5)])))
        store = await engine.store("c0")

        async def bound() -> float:
            return (await engine.backend.score_bounds([store], loan, math.inf))[0].bound

        def terms() -> dict[str, tuple[int, int, int]]:
            with sqlite3.connect(store.path) as db:
                return {t: (d, tf, dl) for t, d, tf, dl in db.execute("SELECT * FROM term_bounds")}

        assert terms() == {"loan": (2, 1, 2), "river": (1, 1, 2), "stone": (1, 1, 2)}
        before = await bound()
        await engine.append(AppendParams(sessionKey="agent:c0:main", events=[msg("c0m2", "user", "loan loan loan", "c0m1", ts=BASE_TS + 9)]))
        assert before < await bound() < math.inf  # the row added holds the word more often than any before
        await engine.delete(SessionRef(sessionKey="agent:c0:other"))  # its index rows deleted: its terms' documents counted out
        assert terms() == {"loan": (2, 3, 2), "river": (1, 1, 2)}
        assert -math.inf < await bound() < math.inf
        assert await store.fold_bounds() == {}  # kept: nothing to fold
