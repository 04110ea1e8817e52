"""`since` and `until` on sessions.search (SPEC §4): validation, the exact boundaries, and the range
inside the ranking (limit counts only hits in range; scores are the whole agent's)."""

from __future__ import annotations

import random
import sqlite3

import pytest

from sessionsearch import InvalidRequest
from sessionsearch.protocol import AppendParams, SearchParams, SessionRef
from sessionsearch.store.rowids import wid_of
from sessionsearch.store.sqlite.scope import ID_BOUNDS_SQL, id_bounds
from sessionsearch.transcript.events import MAX_TS_MS, MIN_TS_MS

from ..helpers import BASE_TS, chain, engine_at, ids, msg, timed, undo_meaning_index

KEY = "agent:main:main"
DAY = 86_400_000
JAN_2 = 1767312000000  # 2026-01-02T00:00:00Z


async def test_since_is_inclusive_and_until_exclusive_at_the_exact_millisecond(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=timed("m", [("user", "tick", BASE_TS + i) for i in range(5)])))
        found = await engine.search(SearchParams(query="tick", since=BASE_TS + 1, until=BASE_TS + 3, limit=25))
        assert sorted(ids(found)) == ["m2", "m3"]  # BASE_TS + 1 and + 2; + 3 is the exclusive end
        assert sorted(ids(await engine.search(SearchParams(query="tick", since=BASE_TS + 4)))) == ["m5"]
        assert sorted(ids(await engine.search(SearchParams(query="tick", until=BASE_TS + 1)))) == ["m1"]
        assert ids(await engine.search(SearchParams(query="tick", since=BASE_TS + 5))) == []


async def test_iso_dates_times_offsets_and_integral_floats_name_the_same_instants(backend):
    async with engine_at(backend) as engine:
        stamps = [JAN_2 - 1, JAN_2, JAN_2 + 3_600_000 + 5, JAN_2 + DAY]
        await engine.append(AppendParams(sessionKey=KEY, events=timed("m", [("user", "tick", ts) for ts in stamps])))

        async def between(since, until=None):
            return sorted(ids(await engine.search(SearchParams(query="tick", since=since, until=until, limit=25))))

        assert await between("2026-01-02", "2026-01-03") == ["m2", "m3"]  # a date alone is midnight UTC
        assert await between("2026-01-02T00:00:00Z", "2026-01-03T00:00Z") == ["m2", "m3"]
        assert await between("2026-01-02 01:00:00.005") == ["m3", "m4"]  # no zone: UTC
        assert await between("2026-01-02T02:00:00.005+01:00") == ["m3", "m4"]
        assert await between("2026-01-01T20:00:00.006-0500") == ["m4"]
        assert await between("2026-01-02T01:00:00.0041") == ["m3", "m4"]  # .0041 ms rounds up to .005
        assert await between(float(JAN_2), JAN_2 + 1.0) == ["m2"]
        assert await between("2026-01-01t23:59:59.999z", "2026-01-02") == ["m1"]


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"since": "yesterday"}, "since",
     "since must be epoch milliseconds or an ISO 8601 date or time, not 'yesterday'"),
    ({"until": "2026-02-30"}, "until",
     "until must be epoch milliseconds or an ISO 8601 date or time, not '2026-02-30'"),
    ({"since": "2026-1-2"}, "since", "not '2026-1-2'"),
    ({"since": "1767312000000"}, "since", "since must be epoch milliseconds or an ISO 8601 date or time"),
    ({"until": 1767312000000.5}, "until", "until must be epoch milliseconds or an ISO 8601 date or time"),
    ({"since": True}, "since", "since must be epoch milliseconds or an ISO 8601 date or time"),
    ({"since": ["2026-01-02"]}, "since", "since must be epoch milliseconds or an ISO 8601 date or time"),
    ({"until": MAX_TS_MS + 1}, "until", f"until must be between {MIN_TS_MS} and {MAX_TS_MS} epoch milliseconds"),
    ({"since": MIN_TS_MS - 1}, "since", "since must be between"),
    ({"since": JAN_2, "until": JAN_2}, "since", "since must be earlier than until"),
    ({"since": "2026-01-03", "until": "2026-01-02T23:00Z"}, "since", "since must be earlier than until"),
    ({"resultMode": "session"}, "resultMode", 'resultMode must be "messages" or "sessions"'),
])
async def test_bad_ranges_and_result_modes_are_refused_naming_the_field(backend, fields, field, message):
    async with engine_at(backend) as engine:
        with pytest.raises(InvalidRequest) as caught:
            await engine.search(SearchParams.of({"query": "tick", **fields}))
        assert message in caught.value.message and caught.value.field == field


async def test_the_range_bounds_are_the_timestamp_range_events_accept(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=timed("m", [("user", "edge", MIN_TS_MS), ("user", "edge", MAX_TS_MS)])))
        assert sorted(ids(await engine.search(SearchParams(query="edge", since=MIN_TS_MS, until=MAX_TS_MS)))) == ["m1"]
        assert ids(await engine.search(SearchParams(query="edge", since=MAX_TS_MS))) == ["m2"]
        # an offset past the first day's start names no instant any message can have: the nearest one
        assert sorted(ids(await engine.search(SearchParams(query="edge", since="0001-01-01T00:00+01:00")))) == ["m1", "m2"]
        assert ids(await engine.search(SearchParams(query="edge", since="9999-12-31T23:59:59.9991Z"))) == []


async def _outranked(engine) -> None:
    """40 short messages that repeat `needle`, out of range, outrank 5 long ones in range."""
    await engine.append(AppendParams(sessionKey=KEY, events=timed("out", [("user", "needle needle needle", BASE_TS + i) for i in range(40)])))
    filler = "some longer text around the word so that it ranks below the repeated ones"
    await engine.append(AppendParams(sessionKey="agent:main:late", events=timed("in", [("assistant", f"needle {filler} {i}", BASE_TS + DAY + i)
                                                         for i in range(5)])))


async def test_a_range_is_inside_the_ranking_so_limit_counts_only_hits_in_range(backend):
    async with engine_at(backend) as engine:
        await _outranked(engine)
        everything = await engine.search(SearchParams(query="needle", limit=25))
        assert all(mid.startswith("out") for mid in ids(everything))  # the in-range hits rank below all 40
        ranged = await engine.search(SearchParams(query="needle", since=BASE_TS + DAY, limit=3))
        assert ids(ranged) == ["in5", "in4", "in3"] and ranged["truncated"] is True  # ties: newest first
        recent = await engine.search(SearchParams(query="needle", until=BASE_TS + DAY, order="recent", limit=3))
        assert ids(recent) == ["out40", "out39", "out38"]
        # a filter does not change a hit's score: the same as over the whole agent
        whole = {h["messageId"]: h["score"] for h in (await engine.search(SearchParams(query="needle", sessionKeys=[
            "agent:main:late"], limit=25)))["results"]}
        assert {h["messageId"]: h["score"] for h in ranged["results"]} == {m: whole[m] for m in ids(ranged)}


async def test_common_words_with_postings_answer_a_range_exactly(tmp_path):  # SQLite only: postings are SQLite's
    async with engine_at(tmp_path) as engine:
        await _outranked(engine)
        built = await engine.optimize(min_docs=10, min_share=0)
        assert "needle" in built["agents"]["main"]["words"]
        await engine.search(SearchParams(query="needle"))  # the store learns which words have postings
        assert "needle" in (await engine.store("main"))._hot_seen[1]
        ranged = await engine.search(SearchParams(query="needle", since=BASE_TS + DAY, limit=3))
        assert ids(ranged) == ["in5", "in4", "in3"] and ranged["truncated"] is True
        assert len(ids(await engine.search(SearchParams(query="needle", until=BASE_TS + DAY, limit=25)))) == 25


def _oracle(db, word: str, since: int | None, until: int | None, order: str, limit: int) -> list[tuple]:
    """The expected hits from FTS5 alone, every match ranked and filtered in Python."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT mid, bm25(msg_fts), ts FROM msg_fts WHERE msg_fts MATCH ?",
                            (f'"{word}"',)).fetchall()
    rows = [r for r in rows if (since is None or r[2] >= since) and (until is None or r[2] < until)]
    rows.sort(key=(lambda r: (-r[2], r[0])) if order == "recent" else (lambda r: (r[1], -r[2], r[0])))
    return [(mid, round(-rank, 6)) for mid, rank, _ in rows[:limit]]


async def test_random_ranges_give_exactly_the_hits_of_ranking_everything_and_filtering(tmp_path):  # SQLite only: the oracle reads the agent's SQLite file, and postings are SQLite's
    """Timestamps out of order within windows, ranges narrow enough for the id span and wide ones,
    both orders, before and after postings; each answer equal to the oracle's."""
    rng = random.Random(20261130)
    words = ["alpha", "beta", "gamma", "delta"]
    span = 10_000_000
    async with engine_at(tmp_path) as engine:
        for s in range(6):
            items = [(rng.choice(["user", "assistant"]), " ".join(rng.choices(words, k=rng.randint(1, 6))),
                      BASE_TS + rng.randrange(span)) for _ in range(120)]
            await engine.append(AppendParams(sessionKey=f"agent:main:s{s}", events=timed(f"s{s}-", items)))
        store = await engine.store("main")
        kinds = {"narrowed": 0, "whole": 0}
        for phase in ("fts5", "postings"):
            if phase == "postings":
                assert len((await engine.optimize(min_docs=50, min_share=0))["agents"]["main"]["words"]) == 4
            for _ in range(60):
                width = rng.choice([rng.randrange(1, span // 40), rng.randrange(span // 10, span)])
                since = BASE_TS + rng.randrange(-span // 10, span) if rng.random() < 0.8 else None
                until = (since or BASE_TS) + width if since is None or rng.random() < 0.8 else None
                word, order, limit = rng.choice(words), rng.choice(["relevance", "recent"]), rng.randint(1, 25)
                async with store.reader() as reader:
                    kinds["narrowed" if await id_bounds(reader.conn, since, until) else "whole"] += 1
                got = await engine.search(SearchParams(query=word, since=since, until=until, order=order, limit=limit))
                assert [(h["messageId"], h["score"]) for h in got["results"]] == \
                    _oracle(tmp_path / "agents" / "main.db", word, since, until, order, limit)
        assert kinds["narrowed"] >= 20 and kinds["whole"] >= 20, kinds


async def test_a_narrow_range_is_an_id_span_holding_every_message_in_it(tmp_path):  # SQLite only: SQLite's id spans (scope.id_bounds)
    async with engine_at(tmp_path) as engine:
        # timestamps falling then rising inside one window: the span comes from the window's bounds
        await engine.append(AppendParams(sessionKey=KEY, events=timed("m", [("user", "w", BASE_TS + t) for t in (900, 5, 400, 1000, 1)])))
        await engine.append(AppendParams(sessionKey="agent:main:b", events=timed("b", [("user", "w", BASE_TS + 100_000 + i) for i in range(100)])))
        store = await engine.store("main")
        async with store.reader() as reader:
            ids_in = [r[0] for r in await reader.conn.execute_fetchall(
                "SELECT id FROM events WHERE text IS NOT NULL AND ts >= ? AND ts < ?", (BASE_TS + 2, BASE_TS + 950))]
            lo, hi = await id_bounds(reader.conn, BASE_TS + 2, BASE_TS + 950)
            # the first window whole, not the second, whose messages are all later
            assert len(ids_in) == 3 and lo <= min(ids_in) and hi >= max(ids_in) and wid_of(lo) == wid_of(hi)
            assert await id_bounds(reader.conn, BASE_TS + 2000, BASE_TS + 3000) == (1, 0)  # none in range
            assert await id_bounds(reader.conn, BASE_TS, BASE_TS + 100_000) is None  # most of the time span


async def test_windows_are_found_by_their_timestamps_however_they_were_written(tmp_path):  # SQLite only: SQLite's id spans (scope.id_bounds)
    """A window's ts_min and ts_max follow appends of older and newer messages and come back with a
    restore, and a window spanning much of the time is found beside short ones (each order of
    magnitude of span has its range of the index): every ranged search gives the oracle's hits."""
    rng = random.Random(20261201)
    span = 10_000_000
    async with engine_at(tmp_path) as engine:
        for s in range(40):  # short windows one after another
            base = BASE_TS + s * span // 40
            await engine.append(AppendParams(sessionKey=f"agent:main:s{s}", events=timed(f"s{s}-", [
                ("user", rng.choice(["alpha", "alpha beta", "beta"]), base + i * 97) for i in range(20)])))
        # one window written over the whole time, its messages appended newest first then oldest
        for n, (text, ts) in enumerate([("alpha", BASE_TS + span // 2), ("alpha late", BASE_TS + span - 1),
                                        ("alpha early", BASE_TS + 3)], 1):
            await engine.append(AppendParams(sessionKey="agent:main:long", events=[msg(f"l{n}", "user", text, f"l{n - 1}" if n > 1 else None, ts=ts)]))
        await engine.archive(SessionRef(sessionKey="agent:main:s7"))
        store = await engine.store("main")
        await store.execute_write("UPDATE windows SET ts_min = NULL, ts_max = NULL WHERE session_key = 'agent:main:s7'")
        await engine.restore(SessionRef(sessionKey="agent:main:s7"))
        await engine.reconcile_pending()
        async with store.reader() as reader:
            bounds = dict((r[0], r[1:]) for r in await reader.conn.execute_fetchall(
                "SELECT session_key, ts_min, ts_max FROM windows"))
            assert bounds["agent:main:long"] == (BASE_TS + 3, BASE_TS + span - 1)
            assert bounds["agent:main:s7"] == (BASE_TS + 7 * span // 40, BASE_TS + 7 * span // 40 + 19 * 97)
        db = tmp_path / "agents" / "main.db"
        narrowed = 0
        for _ in range(60):
            since = BASE_TS + rng.randrange(-span // 50, span)
            until = since + rng.randrange(1, span // 25)
            async with store.reader() as reader:
                narrowed += (await id_bounds(reader.conn, since, until)) not in (None, (1, 0))
            for word in ("alpha", "beta"):
                order = rng.choice(["relevance", "recent"])
                got = await engine.search(SearchParams(query=word, since=since, until=until, order=order, limit=10))
                assert [(h["messageId"], h["score"]) for h in got["results"]] == \
                    _oracle(db, word, since, until, order, 10)
        early = await engine.search(SearchParams(query="early", since=BASE_TS, until=BASE_TS + 10))
        assert ids(early) == ["l3"]
        assert narrowed >= 40


def _to_schema_12(db) -> None:
    """Rewrite a store as schema version 12 left it: the partial index of migration 8, no 13 nor 14."""
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX events_all_by_ts")
        conn.execute("CREATE INDEX events_by_ts ON events (ts) WHERE text IS NOT NULL")
        conn.execute("DROP INDEX windows_by_span")
        conn.execute("ALTER TABLE windows DROP COLUMN ts_min")
        undo_meaning_index(conn)  # migration 15's
        conn.execute("DELETE FROM schema_migrations WHERE version >= 13")


async def test_an_upgraded_store_answers_ranges_the_same_from_a_covering_index(tmp_path):  # SQLite only: SQLite's migration 13
    """Tool results (events the index leaves out) lie among the messages, so the span of a range's
    events is wider than its messages': every ranged search still gives the oracle's hits, before
    the upgrade's rewrite and after it, and the span is read from the index alone."""
    rng = random.Random(20261201)
    words, span = ["alpha", "beta", "gamma"], 1_000_000
    async with engine_at(tmp_path) as engine:
        for s in range(4):
            items = [(rng.choice(["user", "assistant", "toolResult", "toolResult"]),
                      " ".join(rng.choices(words, k=rng.randint(1, 4))), BASE_TS + rng.randrange(span))
                     for _ in range(150)]
            await engine.append(AppendParams(sessionKey=f"agent:main:s{s}", events=timed(f"s{s}-", items)))
    db = tmp_path / "agents" / "main.db"
    queries = []
    for _ in range(40):
        since = BASE_TS + rng.randrange(-span // 20, span)
        queries.append((rng.choice(words), since, since + rng.randrange(1, span // 25),
                        rng.choice(["relevance", "recent"]), rng.randint(1, 10)))

    async def answers(engine) -> list[list[tuple]]:
        out = []
        for word, since, until, order, limit in queries:
            got = await engine.search(SearchParams(query=word, since=since, until=until, order=order, limit=limit))
            out.append([(h["messageId"], h["score"]) for h in got["results"]])
            assert out[-1] == _oracle(db, word, since, until, order, limit)
        return out

    async with engine_at(tmp_path) as engine:
        before = await answers(engine)
    _to_schema_12(db)
    async with engine_at(tmp_path) as engine:
        store = await engine.store("main")
        applied = await store.applied_migrations()  # those past the old layout's 12, whatever came later
        assert applied[12:17] == [(13, "time_ranges_covering"), (14, "window_ts_min"), (15, "meaning_index"),
                                  (16, "score_bounds"), (17, "bounds_log")]
        assert [v for v, _ in applied] == list(range(1, len(applied) + 1))
        assert await answers(engine) == before
        async with store.reader() as reader:
            narrowed = [await id_bounds(reader.conn, since, until) for _, since, until, _, _ in queries]
            plan = " ".join(r[3] for r in await reader.conn.execute_fetchall(
                "EXPLAIN QUERY PLAN " + ID_BOUNDS_SQL, {"since": BASE_TS, "until": BASE_TS + 1, "share": 20, "cap": 9}))
    assert sum(b is not None and b != (1, 0) for b in narrowed) >= 20  # most ranges were narrowed
    assert plan.count("COVERING INDEX events_all_by_ts") == 2 and "USING INDEX" not in plan, plan
    assert "COVERING INDEX windows_by_span" in plan, plan
    with sqlite3.connect(db) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "events_all_by_ts" in names and "events_by_ts" not in names


async def test_every_query_of_a_batch_takes_the_range(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=timed("m", [("user", "red", BASE_TS), ("user", "blue", BASE_TS + 10),
                                              ("user", "red", BASE_TS + 20), ("user", "blue", BASE_TS + 30)])))
        states = (await engine.search(SearchParams(queries=["red", "blue"], since=BASE_TS + 10, until=BASE_TS + 21)))["states"]
        assert [ids(s) for s in states] == [["m3"], ["m2"]]


async def test_cjk_substrings_keep_to_the_range(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=timed("m", [("user", "東京開会", BASE_TS), ("user", "明日東京へ", BASE_TS + DAY),
                                              ("user", "東京駅", BASE_TS + 2 * DAY)])))
        assert sorted(ids(await engine.search(SearchParams(query="東京", limit=25)))) == ["m1", "m2", "m3"]
        assert ids(await engine.search(SearchParams(query="東京", since=BASE_TS + DAY, until=BASE_TS + 2 * DAY))) == ["m2"]


async def test_a_range_leaves_dirty_windows_out_and_says_indexing(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "ledger one")])))
        await engine.append(AppendParams(sessionKey="agent:main:imported", events=chain("i", [("user", "ledger two")])), index=False)
        result = await engine.search(SearchParams(query="ledger", since=BASE_TS))
        assert ids(result) == ["m1"] and result["indexing"] is True


async def test_recent_over_a_range_scores_its_hits_as_fts5_as_the_index_grows(tmp_path):  # SQLite only: the oracle reads the agent's SQLite file
    """`recent` over a short range: plain words scored from document counts kept per index state
    (recent.py), a phrase of two tokens by FTS5 as it sorts; both equal to FTS5's bm25 after each
    append moves the index on (the counts kept must not be stale)."""
    rng = random.Random(20261202)
    span = 1_000_000
    db = tmp_path / "agents" / "main.db"
    async with engine_at(tmp_path) as engine:
        for s in range(8):
            base = BASE_TS + s * span // 8
            await engine.append(AppendParams(sessionKey=f"agent:main:s{s}", events=timed(f"s{s}-", [
                ("user", " ".join(rng.choices(["alpha", "per-session", "beta", "gamma"], k=rng.randint(1, 5))),
                 base + i * 500) for i in range(60)])))
        for round_ in range(3):
            for _ in range(10):
                since = BASE_TS + rng.randrange(span)
                until = since + rng.randrange(1, span // 20)
                for word in ("alpha", "per-session"):
                    got = await engine.search(SearchParams(query=word, since=since, until=until, order="recent", limit=8))
                    assert [(h["messageId"], h["score"]) for h in got["results"]] == \
                        _oracle(db, word, since, until, "recent", 8)
            # more of both words: every document count changes
            await engine.append(AppendParams(sessionKey=f"agent:main:more{round_}", events=timed(f"m{round_}-", [
                ("user", "alpha per-session alpha", BASE_TS + rng.randrange(span)) for _ in range(30)])))
