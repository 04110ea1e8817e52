"""Row ids (store/rowids.py): windows longer than the low region, and stores written with the
layout of schema version 5, migrated on open."""

from __future__ import annotations

import gzip
import json
import sqlite3

from sessionsearch.protocol import AppendParams, HistoryParams, SearchParams, SessionRef
from sessionsearch.store.rowids import HIGH, LOW_SEQS, MAX_SEQ, row_id, seq_of, seq_ranges, wid_of

from ..helpers import chain, engine_at, ids, leaf, msg, undo_meaning_index

KEY = "agent:main:long"
OTHER = "agent:main:other"
N = LOW_SEQS + 904  # messages 1..N; the window's seqs past 65,535 are in the high region
NEEDLES = (11, LOW_SEQS + 104, N - 10)  # one low, two high


def _long_texts() -> list[tuple[str, str]]:
    return [("assistant" if i % 2 == 0 else "user",
             f"row {i} " + ("needle here" if i in NEEDLES else "ローン相談" if i == N - 5 else "filler"))
            for i in range(1, N + 1)]


def _v1(rid: int) -> int:
    """The schema-version-5 id of a row (wid << 31 | seq << 1 | assistant)."""
    return (wid_of(rid) << 31) | (seq_of(rid) << 1) | (rid & 1)


async def _append_long(engine, key: str = KEY) -> None:
    events = chain("m", _long_texts())
    for start in range(0, len(events), 10_000):  # the most one append takes
        await engine.append(AppendParams(sessionKey=key, events=events[start:start + 10_000], sessionId="s-long"))


async def _window(engine, key: str) -> int:
    store = await engine.store("main")
    async with store.reader() as reader:
        return (await store.window_of(reader, key, None))[0]


async def _rows(engine, wid: int) -> tuple[list[int], list[int]]:
    """(index row ids, ids of the active-branch messages) of a window."""
    store = await engine.store("main")
    async with store.reader() as reader:
        branch = await reader.conn.execute_fetchall(
            "SELECT id FROM events WHERE wid = ? AND on_branch = 1 AND text IS NOT NULL ORDER BY id", (wid,))
        return await store.index_rows(reader, wid), [r[0] for r in branch]


def test_ids_round_trip_on_both_sides_of_the_low_region():
    for wid in (1, 2, 77, (1 << 31) - 1):
        for seq in (0, 1, LOW_SEQS - 1, LOW_SEQS, LOW_SEQS + 1, MAX_SEQ):
            for role in ("user", "assistant"):
                rid = row_id(wid, seq, role)
                assert (wid_of(rid), seq_of(rid), rid & 1) == (wid, seq, role == "assistant")
                assert (rid >= HIGH) == (seq >= LOW_SEQS)
    # a window's ids rise with seq, and a seq range is one id range or two
    assert row_id(5, LOW_SEQS - 1, "assistant") < row_id(5, LOW_SEQS, "user")
    assert seq_ranges(5, 10, 20) == [(row_id(5, 10, None), row_id(5, 20, "assistant"))]
    assert seq_ranges(5, LOW_SEQS - 2, LOW_SEQS + 2) == [
        (row_id(5, LOW_SEQS - 2, None), row_id(5, LOW_SEQS - 1, "assistant")),
        (row_id(5, LOW_SEQS, None), row_id(5, LOW_SEQS + 2, "assistant"))]
    # neighbouring windows' low rows are 131,072 ids apart: three bytes of FTS5 doclist
    assert row_id(6, 0, None) - row_id(5, 0, None) == 1 << 17


async def test_a_window_past_the_low_region_is_searched_scoped_paged_rewound_and_deleted(tmp_path):
    async with engine_at(tmp_path, reconcile_batch_rows=500) as engine:
        await _append_long(engine)
        await engine.append(AppendParams(sessionKey=OTHER, events=chain("o", [("user", "needle elsewhere")]), sessionId="s-other"))
        wid = await _window(engine, KEY)
        every = await engine.search(SearchParams(query="needle", limit=25))
        assert sorted(ids(every)) == sorted([f"m{i}" for i in NEEDLES] + ["o1"])
        scoped = await engine.search(SearchParams(query="needle", sessionId="s-long", limit=25))
        assert sorted(ids(scoped)) == sorted(f"m{i}" for i in NEEDLES)
        unscoped_scores = {h["messageId"]: h["score"] for h in every["results"]}
        assert all(h["score"] == unscoped_scores[h["messageId"]] for h in scoped["results"])
        keyed = await engine.search(SearchParams(query="needle", sessionKeys=[KEY, OTHER], role="user", limit=25))
        assert sorted(ids(keyed)) == sorted([f"m{i}" for i in NEEDLES if i % 2] + ["o1"])
        assert ids(await engine.search(SearchParams(query="needle", sessionId="s-other"))) == ["o1"]  # no long window in scope
        # the CJK retry (a literal substring, nothing matched as a word) scans both ranges too
        assert ids(await engine.search(SearchParams(query="ローン", sessionId="s-long"))) == [f"m{N - 5}"]
        assert ids(await engine.search(SearchParams(query="ローン", sessionId="s-other"))) == []
        recent = await engine.search(SearchParams(query="needle", sessionId="s-long", order="recent"))
        assert ids(recent) == [f"m{i}" for i in sorted(NEEDLES, reverse=True)]

        tail = await engine.history(HistoryParams(sessionKey=KEY, limit=3))
        assert [m["messageId"] for m in tail["messages"]] == [f"m{N - 2}", f"m{N - 1}", f"m{N}"]
        across = await engine.history(HistoryParams(sessionKey=KEY, limit=4, offset=N - LOW_SEQS - 1))
        assert [m["messageId"] for m in across["messages"]] == [f"m{i}" for i in range(LOW_SEQS - 2, LOW_SEQS + 2)]
        anchored = await engine.history(HistoryParams(sessionKey=KEY, sessionId="s-long", messageId=f"m{NEEDLES[1]}", limit=3))
        assert [m["messageId"] for m in anchored["messages"]] == [f"m{NEEDLES[1] + d}" for d in (-1, 0, 1)]

        # rewind from the high region into the low one: the needles past it leave the branch
        await engine.append(AppendParams(sessionKey=KEY, events=[leaf("l1", f"m{N}", "m100"), msg("r1", "user", "needle after rewind", "l1")]))
        assert (await engine.search(SearchParams(query="needle", sessionId="s-long"))).get("indexing") is True
        assert (await engine.reconcile("main", wid)).outcome == "published"
        assert sorted(ids(await engine.search(SearchParams(query="needle", sessionId="s-long")))) == ["m11", "r1"]
        index, branch = await _rows(engine, wid)
        assert index == branch and len(branch) == 101 and branch[-1] >= HIGH  # r1 is a high row

        await engine.archive(SessionRef(sessionKey=KEY))
        assert ids(await engine.search(SearchParams(query="needle"))) == ["o1"]
        await engine.history(HistoryParams(sessionKey=KEY))  # opening the session restores it
        await engine.reconcile_pending()
        assert sorted(ids(await engine.search(SearchParams(query="needle", sessionId="s-long")))) == ["m11", "r1"]

        await engine.delete(SessionRef(sessionKey=KEY))
        assert ids(await engine.search(SearchParams(query="needle", limit=25))) == ["o1"]
    with sqlite3.connect(tmp_path / "agents" / "main.db") as conn:
        assert conn.execute("SELECT count(*) FROM events WHERE wid = ?", (wid,)).fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM msg_fts WHERE rowid >= ?", (HIGH,)).fetchone() == (0,)


def _to_schema_5(db, cold_file) -> None:
    """Rewrite a store (and one cold file) as schema version 5 wrote them: every id `wid << 31 |
    seq << 1 | assistant`, postings built, migrations 6 onwards not recorded."""
    with sqlite3.connect(db) as conn:
        fts = conn.execute("SELECT rowid, text, ts, mid FROM msg_fts").fetchall()
        conn.execute("DELETE FROM msg_fts")
        conn.executemany("INSERT INTO msg_fts (rowid, text, ts, mid) VALUES (?, ?, ?, ?)",
                         [(_v1(r[0]), *r[1:]) for r in sorted(fts, key=lambda r: _v1(r[0]))])
        events = conn.execute("SELECT id FROM events").fetchall()
        conn.executemany("UPDATE events SET id = ? WHERE id = ?", [(-_v1(rid), rid) for (rid,) in events])
        conn.execute("UPDATE events SET id = -id")
        conn.execute("INSERT INTO hot_words VALUES ('filler', 1, 0, '[1]', 1, 0)")
        conn.execute("INSERT INTO hot_postings VALUES (1, 1, 3, ?)", (fts[0][0],))
        conn.execute("DROP INDEX windows_long")
        conn.execute("DROP INDEX events_ts")
        conn.execute("DROP INDEX windows_by_span")  # migration 14's
        conn.execute("ALTER TABLE windows DROP COLUMN ts_min")
        conn.execute("DROP INDEX windows_by_ts_max")  # migration 10's, on the windows table that 6 keeps
        conn.execute("ALTER TABLE windows DROP COLUMN ts_max")
        conn.execute("DROP TABLE prefix_words")  # migration 11's
        conn.execute("DROP TABLE prefix_postings")
        conn.execute("DROP TABLE index_gone")  # migration 12's
        conn.execute("DROP INDEX events_all_by_ts")  # migration 13's
        undo_meaning_index(conn)  # migration 15's
        conn.execute("DELETE FROM schema_migrations WHERE version >= 6")
    with gzip.open(cold_file, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    with gzip.open(cold_file, "wt", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps([_v1(row[0]), *row[1:]]) + "\n")


async def test_a_store_written_with_the_old_row_ids_is_migrated_on_open(tmp_path):
    async with engine_at(tmp_path) as engine:
        await _append_long(engine)
        await engine.append(AppendParams(sessionKey=OTHER, events=chain("o", [("user", "needle elsewhere"), ("assistant", "cold needle")])))
        await engine.append(AppendParams(sessionKey="agent:main:cold", events=chain("c", [("user", "archived needle")])))
        await engine.archive(SessionRef(sessionKey="agent:main:cold"))
        before = await engine.search(SearchParams(query="needle", limit=25))
        wid = await _window(engine, KEY)
    (cold_file,) = (tmp_path / "cold" / "main").iterdir()
    _to_schema_5(tmp_path / "agents" / "main.db", cold_file)

    async with engine_at(tmp_path) as engine:
        store = await engine.store("main")
        assert [v for v, _ in await store.applied_migrations()][-13:] == [6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]
        # migration 9 hands the window with CJK text ("ローン相談") to reconciliation
        assert (await engine.search(SearchParams(query="needle", limit=25)))["indexing"] is True
        await engine.reconcile_pending()
        after = await engine.search(SearchParams(query="needle", limit=25))
        assert [(h["messageId"], h["score"]) for h in after["results"]] == \
            [(h["messageId"], h["score"]) for h in before["results"]]
        assert sorted(ids(await engine.search(SearchParams(query="needle", sessionId="s-long")))) == sorted(f"m{i}" for i in NEEDLES)
        index, branch = await _rows(engine, wid)
        assert index == branch and len(branch) == N and sum(r >= HIGH for r in branch) == N - LOW_SEQS + 1
        tail = await engine.history(HistoryParams(sessionKey=KEY, limit=2))
        assert [m["messageId"] for m in tail["messages"]] == [f"m{N - 1}", f"m{N}"]
        # appends go on at the next seq, and the postings (old ids) are gone
        await engine.append(AppendParams(sessionKey=KEY, events=[msg("z1", "user", "needle appended", f"m{N}")]))
        assert "z1" in ids(await engine.search(SearchParams(query="needle", sessionId="s-long", order="recent")))
        async with store.reader() as reader:
            assert await reader.conn.execute_fetchall("SELECT count(*) FROM hot_postings") == [(0,)]
        # the cold file kept its old ids: restored under the new ones
        await engine.history(HistoryParams(sessionKey="agent:main:cold"))
        await engine.reconcile_pending()
        assert "c1" in ids(await engine.search(SearchParams(query="archived needle")))
        cold_wid = await _window(engine, "agent:main:cold")
        index, branch = await _rows(engine, cold_wid)
        assert index == branch == [row_id(cold_wid, seq_of(branch[0]), "user")]
