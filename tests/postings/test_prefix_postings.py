"""Short prefixes' postings (store/sqlite/prefixes.py): one-word prefix searches answered from
them give exactly FTS5's own ranking (bm25, then newest, then message id, the same bm25 values),
whatever was appended, deleted or reconciled since they were built."""

from __future__ import annotations

import asyncio
import random
import sqlite3

import aiosqlite
import pytest

from sessionsearch.protocol import AppendParams, SearchParams, SessionRef
from sessionsearch.store.sqlite import bounds as sqlite_bounds
from sessionsearch.store.sqlite import postings_build as postings_due_module
from sessionsearch.store.sqlite import prefixes as sqlite_prefixes
from sessionsearch.store.sqlite.prefixes import PrefixTop

from ..helpers import chain, engine_at, ids, leaf, msg

# prefixes of several frequencies: `al` in most rows, `alp` in many, `bo` in a few, `zq` in one
VOCAB = ["alpha", "alpine", "alps", "alto", "also", "album", "beta", "bet", "better", "cat", "cart", "dog"]


@pytest.fixture
def prefix_calls(monkeypatch):
    """How often a prefix search was answered from postings, and how often it fell back."""
    calls = {"answered": 0, "fell_back": 0}
    original = PrefixTop.top

    async def counting(self, *args, **kwargs):
        top = await original(self, *args, **kwargs)
        calls["answered" if top is not None else "fell_back"] += 1
        return top

    monkeypatch.setattr(PrefixTop, "top", counting)
    monkeypatch.setattr(sqlite_prefixes, "MIN_DOCS", 20)
    monkeypatch.setattr(sqlite_prefixes, "CAP", 40)  # runs cut short: a limit past them falls back
    return calls


async def _corpus(engine, sessions: int = 16, seed: int = 5, name: str = "s") -> None:
    rng = random.Random(seed)
    for s in range(sessions):
        texts = [("user" if i % 2 == 0 else "assistant",
                  " ".join(rng.choice(VOCAB) for _ in range(rng.choice([1, 2, 3, 5, 9, 20]))))
                 for i in range(24)]
        # timestamps repeat across sessions: ties in bm25 are broken by time, then message id
        await engine.append(AppendParams(sessionKey=f"agent:main:{name}{s}", events=chain(f"{name}{s}m", texts, ts=1_000_000 + 1000 * (s % 3))))


def _fts5_alone(path, prefix: str, k: int) -> list[tuple[int, float]]:
    """The oracle: FTS5 ranking every match."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT rowid, bm25(msg_fts) FROM msg_fts WHERE msg_fts MATCH ? "
                            "ORDER BY bm25(msg_fts), ts DESC, mid LIMIT ?", (f'"{prefix}" *', k)).fetchall()
    finally:
        conn.close()


async def _top(path, prefix: str, k: int) -> list[tuple[int, float]] | None:
    async with aiosqlite.connect(path) as conn:
        await conn.execute("BEGIN")
        return await PrefixTop().top(conn, prefix, k)


class _Never:
    async def top(self, *args) -> None:
        return None


async def _same_both_ways(engine, body: dict) -> dict:
    """The search from postings equals the one FTS5 alone gives."""
    from_postings = await engine.search(SearchParams.of(body))
    store = await engine.store("main")
    original, store._prefix_top = store._prefix_top, _Never()  # this one search ranks with FTS5 alone
    try:
        assert from_postings == await engine.search(SearchParams.of(body))
    finally:
        store._prefix_top = original
    return from_postings


@pytest.mark.parametrize("cap,keep", [(6, 512), (40, 512), (40, 60)])
async def test_top_hits_and_scores_equal_fts5_for_prefixes_of_every_frequency(tmp_path, prefix_calls, monkeypatch,
                                                                              cap, keep):
    monkeypatch.setattr(sqlite_prefixes, "CAP", cap)
    monkeypatch.setattr(sqlite_prefixes, "KEEP", keep)
    async with engine_at(tmp_path) as engine:
        await _corpus(engine)
        built = await engine.optimize(min_docs=10_000)  # no common words: prefixes only
        assert built["agents"]["main"]["prefixes"]["count"] >= 5
        path = (await engine.store("main")).path
        answered = []
        for prefix in ("al", "alp", "alph", "be", "bet", "ca", "do"):
            for k in (1, 5, 25, 60):
                top = await _top(path, prefix, k)
                if top is not None:
                    answered.append((prefix, k))
                    assert top == _fts5_alone(path, prefix, k)  # same rows, order and bm25 values
        prefixes = ("al", "alp", "alph", "be", "bet", "ca", "do")
        if (cap, keep) == (40, 512):  # every top 25 is within the rows kept; a top 60 is not always
            every = {(p, k) for p in prefixes for k in (1, 5, 25, 60)}
            assert {(p, k) for p in prefixes for k in (1, 5, 25)} <= set(answered) != every
        else:  # the first hits are; with 6 rows a run, the top 25 of none
            assert ("al", 1) in answered and ("alp", 5) in answered
            assert cap != 6 or not any(k >= 25 for _, k in answered)


LONG = ["alphabet", "alphabetic", "alphanumeric", "alphorn", "amber", "beta", "betting", "bettor", "cat"]


async def test_one_letter_and_five_to_eight_letter_prefixes_are_answered_exactly(tmp_path, prefix_calls):
    """The palette's last word as typed: a prefix of one letter, or of five to eight, is answered
    from postings as exactly as FTS5 alone answers it, before and after appends since the build."""
    async with engine_at(tmp_path) as engine:
        rng = random.Random(11)
        for s in range(12):
            texts = [("user", " ".join(rng.choice(LONG) for _ in range(rng.choice([1, 2, 4, 7, 15])))) for _ in range(20)]
            await engine.append(AppendParams(sessionKey=f"agent:main:l{s}", events=chain(f"l{s}m", texts, ts=1_000_000 + 1000 * (s % 3))))
        built = await engine.optimize(min_docs=10_000)
        path = (await engine.store("main")).path
        prefixes = ("a", "b", "alpha", "alphab", "alphabe", "alphabet", "betti", "bettor", "alphor")
        for prefix in prefixes:
            for k in (1, 5, 25):
                assert await _top(path, prefix, k) == _fts5_alone(path, prefix, k), (prefix, k)
        assert built["agents"]["main"]["prefixes"]["count"] >= len(prefixes)
        await engine.append(AppendParams(sessionKey="agent:main:late", events=chain("late", [("user", "alphabetic " * 6), ("user", "b")])))
        for prefix in prefixes:
            for k in (1, 25):
                await _same_both_ways(engine, {"query": prefix.upper(), "match": "prefix", "limit": k})
        assert ids(await _same_both_ways(engine, {"query": "alphabe", "match": "prefix", "limit": 1})) == ["late1"]
        assert prefix_calls["fell_back"] == 0 and prefix_calls["answered"] >= 2 * len(prefixes) + 1


async def test_searches_from_postings_equal_fts5_alone_after_appends_deletes_and_reconcile(tmp_path, prefix_calls):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine)
        await engine.optimize(min_docs=10_000)
        bodies = [{"query": q, "match": "prefix", "limit": n} for q in ("al", "ALP", "bet", "do") for n in (3, 25)]
        for body in bodies:
            await _same_both_ways(engine, body)
        assert prefix_calls["answered"] >= 6
        # appended after the build: the new rows are scored from the log, and beat the rest
        await engine.append(AppendParams(sessionKey="agent:main:late", events=chain("late", [("user", "cat"), ("assistant", "alpine " * 6)])))
        assert ids(await _same_both_ways(engine, {"query": "alpi", "match": "prefix", "limit": 3}))[0] == "late2"
        before = prefix_calls["answered"]
        for body in bodies:
            await _same_both_ways(engine, body)
        assert prefix_calls["answered"] > before
        # rows indexed by reconciliation are logged like appends
        await engine.append(AppendParams(sessionKey="agent:main:imported", events=chain("imp", [("user", "dog " * 12)])), index=False)
        await engine.reconcile_pending()
        assert ids(await _same_both_ways(engine, {"query": "do", "match": "prefix", "limit": 3}))[0] == "imp1"
        # a delete: its rows are counted out of the document counts and the rows kept
        await engine.delete(SessionRef(sessionKey="agent:main:s0"))
        answered = prefix_calls["answered"]
        result = await _same_both_ways(engine, {"query": "al", "match": "prefix", "limit": 25})
        assert not any(i.startswith("s0m") for i in ids(result))
        assert prefix_calls == {"answered": answered + 1, "fell_back": 0}
        await engine.optimize(min_docs=10_000)
        answered = prefix_calls["answered"]
        for body in bodies:
            await _same_both_ways(engine, body)
        assert prefix_calls["answered"] > answered


async def test_other_searches_keep_their_path(tmp_path, prefix_calls):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=4)
        await engine.optimize(min_docs=10_000)
        for body in ({"query": "al"}, {"query": "alpha be", "match": "prefix"}, {"query": "alpinexyz", "match": "prefix"},
                     {"query": "al", "match": "prefix", "order": "recent"},
                     {"query": "al", "match": "prefix", "sessionKeys": ["agent:main:s1"]},
                     {"query": "al", "match": "prefix", "role": "user"}):
            await engine.search(SearchParams.of(body))
        assert prefix_calls == {"answered": 0, "fell_back": 0}
        await _same_both_ways(engine, {"query": "al", "match": "prefix"})
        assert prefix_calls == {"answered": 1, "fell_back": 0}
        await engine.search(SearchParams.of({"query": "zq", "match": "prefix"}))  # no postings for it
        assert prefix_calls == {"answered": 1, "fell_back": 1}


async def test_top_hits_stay_exact_through_rewinds_archives_restores_and_deletes_since_the_build(tmp_path,
                                                                                              prefix_calls):
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:r", events=chain("r", [("user", "cat"), ("user", "alpine " * 9),
                                                        ("assistant", "alps")])))
        await _corpus(engine)
        await engine.optimize(min_docs=10_000)
        assert ids(await _same_both_ways(engine, {"query": "alpi", "match": "prefix", "limit": 1})) == ["r2"]
        # rewind to r1: reconciliation deletes r2 and r3 from the index and indexes r4
        await engine.append(AppendParams(sessionKey="agent:main:r", events=[leaf("rl", "r3", "r1"), msg("r4", "user", "alpine " * 8, "rl")]))
        await engine.reconcile_pending()
        answered = prefix_calls["answered"]
        assert ids(await _same_both_ways(engine, {"query": "alpi", "match": "prefix", "limit": 1})) == ["r4"]
        # archived: out of the index; restored and reconciled: the same row ids indexed again
        await engine.archive(SessionRef(sessionKey="agent:main:s1"))
        result = await _same_both_ways(engine, {"query": "al", "match": "prefix", "limit": 25})
        assert not any(i.startswith("s1m") for i in ids(result))
        await engine.restore(SessionRef(sessionKey="agent:main:s1"))
        await engine.reconcile_pending()
        await engine.delete(SessionRef(sessionKey="agent:main:s2"))
        for prefix in ("al", "alp", "alph", "be", "bet", "ca", "do"):
            for limit in (1, 5, 25):
                await _same_both_ways(engine, {"query": prefix, "match": "prefix", "limit": limit})
        assert prefix_calls["answered"] >= answered + 20


async def test_an_index_change_not_logged_sends_prefixes_to_fts5(tmp_path, prefix_calls):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=6)
        await engine.optimize(min_docs=10_000)
        store = await engine.store("main")
        await engine.search(SearchParams.of({"query": "al", "match": "prefix"}))  # the store learns there is no backlog
        await _same_both_ways(engine, {"query": "al", "match": "prefix"})
        assert prefix_calls == {"answered": 1, "fell_back": 0}
        # a row removed behind the writer's back: the changes logged no longer account for the row count
        await store.execute_write("DELETE FROM msg_fts WHERE rowid = (SELECT max(rowid) FROM msg_fts)")
        await engine.search(SearchParams.of({"query": "al", "match": "prefix"}))
        assert prefix_calls == {"answered": 1, "fell_back": 1}
        assert (await store.optimize(min_docs=10_000, incremental=True))["prefixes"] is None
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) is None


async def test_a_fold_takes_the_changes_into_the_postings_and_cuts_the_logs(tmp_path, prefix_calls, monkeypatch):
    monkeypatch.setattr(sqlite_prefixes, "FOLD_AFTER", 10)
    monkeypatch.setattr(postings_due_module, "FOLD_AFTER", 10)
    async with engine_at(tmp_path) as engine:
        await _corpus(engine)
        store = await engine.store("main")
        await store.optimize(min_docs=10_000, incremental=True)
        await engine.search(SearchParams.of({"query": "al", "match": "prefix"}))  # the store learns there is no backlog
        await engine.append(AppendParams(sessionKey="agent:main:late", events=chain("late", [("user", "alpine " * 5), ("user", "beta alto")])))
        db = sqlite3.connect(store.path)
        (gone_wid,) = db.execute("SELECT wid FROM windows WHERE session_key = 'agent:main:s3'").fetchone()
        assert db.execute("SELECT 1 FROM prefix_postings WHERE rid >> 17 = ?", (gone_wid,)).fetchall()
        db.close()
        await engine.delete(SessionRef(sessionKey="agent:main:s3"))
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) == "fold"
        before = {p: await _top(store.path, p, 25) for p in ("al", "alp", "be", "do")}
        folded = (await store.optimize(min_docs=10_000, incremental=True))["prefixes"]
        assert folded["folded"] == 2 + 24 and folded["count"] >= 5
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) is None
        db = sqlite3.connect(store.path)
        try:
            assert db.execute("SELECT count(*) FROM index_log").fetchone() == (0,)
            assert db.execute("SELECT count(*) FROM index_gone").fetchone() == (0,)
            assert not db.execute("SELECT 1 FROM prefix_postings WHERE rid >> 17 = ?", (gone_wid,)).fetchall()
        finally:
            db.close()
        for prefix, top in before.items():  # the same answers from the folded postings alone
            assert await _top(store.path, prefix, 25) == top == _fts5_alone(store.path, prefix, 25)
        answered = prefix_calls["answered"]
        for body in ({"query": "alpi", "match": "prefix", "limit": 1}, {"query": "be", "match": "prefix"}):
            await _same_both_ways(engine, body)
        assert prefix_calls["answered"] == answered + 2


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_writes_deletes_and_folds_keep_every_answer_equal_to_fts5(tmp_path, prefix_calls, monkeypatch,
                                                                              seed):
    monkeypatch.setattr(sqlite_prefixes, "FOLD_AFTER", 1)
    monkeypatch.setattr(postings_due_module, "FOLD_AFTER", 1)
    rng = random.Random(seed)
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=10, seed=seed)
        store = await engine.store("main")
        await store.optimize(min_docs=10_000, incremental=True)
        live = [f"agent:main:s{i}" for i in range(10)]
        searcher = PrefixTop()  # one per store, as the store keeps it: it reads the changes span by span
        for step in range(24):
            op = rng.choice(["append", "append", "rewind", "delete", "archive", "fold"])
            key = rng.choice(live)
            if op == "append":
                texts = [("user", " ".join(rng.choice(VOCAB) for _ in range(rng.choice([1, 3, 12])))) for _ in range(3)]
                await engine.append(AppendParams(sessionKey=key, events=chain(f"a{step}m", texts, parent=None)))
            elif op == "rewind":
                await engine.append(AppendParams(sessionKey=key, events=[leaf(f"l{step}", f"{key[11:]}m24", f"{key[11:]}m{rng.randint(1, 20)}")]))
            elif op == "delete" and len(live) > 4:
                await engine.delete(SessionRef(sessionKey=live.pop(live.index(key))))
            elif op == "archive":
                await engine.archive(SessionRef(sessionKey=key))
                await engine.restore(SessionRef(sessionKey=key))
            elif op == "fold":
                await store.optimize(min_docs=10_000, incremental=True)
            await engine.reconcile_pending()
            async with aiosqlite.connect(store.path) as conn:
                for prefix in ("al", "alp", "be", "bet", "ca", "do"):
                    for k in (1, 5, 25):
                        await conn.execute("BEGIN")
                        top = await searcher.top(conn, prefix, k)
                        await conn.execute("COMMIT")
                        if top is not None:
                            assert top == _fts5_alone(store.path, prefix, k), (step, op, prefix, k)
        assert prefix_calls["answered"] >= 24 * 6


async def test_postings_built_before_the_upgrade_stay_exact_through_deletes_after_it(tmp_path, prefix_calls):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=8)
        await engine.optimize(min_docs=10_000)
        await engine.append(AppendParams(sessionKey="agent:main:late", events=chain("late", [("user", "alpine " * 4)])))
    with sqlite3.connect(tmp_path / "agents" / "main.db") as conn:  # as schema version 11 left it
        conn.execute("DROP TABLE index_gone")
        conn.execute("ALTER TABLE prefix_words DROP COLUMN gone_seq")
        conn.execute("DELETE FROM schema_migrations WHERE version = 12")
    async with engine_at(tmp_path) as engine:
        await engine.search(SearchParams.of({"query": "al", "match": "prefix"}))  # the store learns there is no backlog
        await engine.delete(SessionRef(sessionKey="agent:main:s5"))
        for prefix in ("al", "alp", "be"):
            await _same_both_ways(engine, {"query": prefix, "match": "prefix", "limit": 25})
        assert prefix_calls == {"answered": 3, "fell_back": 0}


async def test_a_build_counts_out_the_rows_deleted_while_it_read(tmp_path, prefix_calls):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=8)
        await engine.optimize(min_docs=20, min_share=0.0)  # common words too: they keep the log running
        store = await engine.store("main")
        await store.execute_write("UPDATE prefix_words SET log_seq = -1")  # given up: a build is due
        read = await asyncio.to_thread(sqlite_prefixes.read_prefixes, store.path)
        await engine.delete(SessionRef(sessionKey="agent:main:s4"))  # after the build's snapshot, before it is stored
        await store._run(lambda w: w.hot.drop_hot_words({"alpha", "beta", "alps"}))  # cuts the logs
        await store._run(lambda w: w.prefixes.store_prefixes(*read))
        await engine.search(SearchParams.of({"query": "al", "match": "prefix"}))  # the store learns there is no backlog
        result = await _same_both_ways(engine, {"query": "al", "match": "prefix", "limit": 25})
        assert not any(i.startswith("s4m") for i in ids(result))
        assert prefix_calls == {"answered": 1, "fell_back": 0}


async def test_past_the_log_limit_prefixes_are_searched_with_fts5_alone(tmp_path, prefix_calls, monkeypatch):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=6)
        await engine.optimize(min_docs=10_000)
        monkeypatch.setattr(sqlite_prefixes, "LOG_LIMIT", 5)
        await engine.search(SearchParams.of({"query": "al", "match": "prefix"}))  # the store learns there is no backlog
        await engine.append(AppendParams(sessionKey="agent:main:late", events=chain("late", [("user", "alpha beta")] * 3)))
        await _same_both_ways(engine, {"query": "al", "match": "prefix"})
        assert prefix_calls == {"answered": 1, "fell_back": 0}  # 3 rows indexed since the build: within
        await _corpus(engine, sessions=1, seed=9, name="more")  # 27: past it
        await _same_both_ways(engine, {"query": "al", "match": "prefix"})
        assert prefix_calls == {"answered": 1, "fell_back": 1}


async def test_incremental_builds_fold_the_prefixes_and_redo_them_only_when_given_up(tmp_path, prefix_calls,
                                                                                     monkeypatch):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=6)
        store = await engine.store("main")
        assert (await store.optimize(min_docs=10_000, incremental=True))["prefixes"]["count"] >= 5  # none yet
        assert (await store.optimize(min_docs=10_000, incremental=True))["prefixes"] is None  # usable: kept
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) is None
        monkeypatch.setattr(sqlite_prefixes, "FOLD_AFTER", 10)
        monkeypatch.setattr(sqlite_bounds, "FOLD_AFTER", 0)  # the score bounds due at every change of the index
        monkeypatch.setattr(postings_due_module, "FOLD_AFTER", 10)
        await engine.append(AppendParams(sessionKey="agent:main:late", events=chain("late", [("user", "alpha beta")] * 6)))
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) is None  # the prefixes: not yet
        await engine.append(AppendParams(sessionKey="agent:main:late", events=chain("more", [("user", "alpha beta")] * 4, parent="late6")))
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) == "fold"
        assert (await store.optimize(min_docs=10_000, incremental=True))["prefixes"]["folded"] == 10
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) is None
        await store.execute_write("UPDATE prefix_words SET log_seq = -1")  # given up (postings.py: past FRESH_LIMIT)
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) == "stale"
        built = (await store.optimize(min_docs=10_000, incremental=True))["prefixes"]
        assert "folded" not in built and built["count"] >= 5
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) is None
