"""Short prefixes' postings (store/sqlite/prefixes.py): one-word prefix searches answered from
them give exactly FTS5's own ranking (bm25, then newest, then message id, the same bm25 values),
whatever was appended, deleted or reconciled since they were built."""

from __future__ import annotations

import random
import sqlite3

import aiosqlite
import pytest

from sessionsearch.store.sqlite import postings_due as postings_due_module
from sessionsearch.store.sqlite import prefixes as sqlite_prefixes
from sessionsearch.store.sqlite.prefixes import PrefixTop

from .helpers import chain, engine_at, ids

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
        await engine.append(f"agent:main:{name}{s}", chain(f"{name}{s}m", texts, ts=1_000_000 + 1000 * (s % 3)))


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
    from_postings = await engine.search(body)
    store = await engine.store("main")
    original, store._prefix_top = store._prefix_top, _Never()  # this one search ranks with FTS5 alone
    try:
        assert from_postings == await engine.search(body)
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
            assert {(p, k) for p in prefixes for k in (1, 5, 25)} <= set(answered) != {(p, k) for p in prefixes for k in (1, 5, 25, 60)}
        else:  # the first hits are; with 6 rows a run, the top 25 of none
            assert ("al", 1) in answered and ("alp", 5) in answered
            assert cap != 6 or not any(k >= 25 for _, k in answered)


async def test_searches_from_postings_equal_fts5_alone_after_appends_deletes_and_reconcile(tmp_path, prefix_calls):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine)
        await engine.optimize(min_docs=10_000)
        bodies = [{"query": q, "match": "prefix", "limit": n} for q in ("al", "ALP", "bet", "do") for n in (3, 25)]
        for body in bodies:
            await _same_both_ways(engine, body)
        assert prefix_calls["answered"] >= 6
        # appended after the build: the new rows are scored from the log, and beat the rest
        await engine.append("agent:main:late", chain("late", [("user", "cat"), ("assistant", "alpine " * 6)]))
        assert ids(await _same_both_ways(engine, {"query": "alpi", "match": "prefix", "limit": 3}))[0] == "late2"
        before = prefix_calls["answered"]
        for body in bodies:
            await _same_both_ways(engine, body)
        assert prefix_calls["answered"] > before
        # rows indexed by reconciliation are logged like appends
        await engine.append("agent:main:imported", chain("imp", [("user", "dog " * 12)]), index=False)
        await engine.reconcile_pending()
        assert ids(await _same_both_ways(engine, {"query": "do", "match": "prefix", "limit": 3}))[0] == "imp1"
        # a delete: the document counts of the build are no longer known, FTS5 answers until the next build
        await engine.delete("agent:main:s0")
        fell_back = prefix_calls["fell_back"]
        result = await _same_both_ways(engine, {"query": "al", "match": "prefix", "limit": 25})
        assert not any(i.startswith("s0m") for i in ids(result))
        assert prefix_calls["fell_back"] == fell_back + 1
        await engine.optimize(min_docs=10_000)
        answered = prefix_calls["answered"]
        for body in bodies:
            await _same_both_ways(engine, body)
        assert prefix_calls["answered"] > answered


async def test_other_searches_keep_their_path(tmp_path, prefix_calls):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=4)
        await engine.optimize(min_docs=10_000)
        for body in ({"query": "al"}, {"query": "alpha be", "match": "prefix"}, {"query": "a", "match": "prefix"},
                     {"query": "alpin", "match": "prefix"}, {"query": "al", "match": "prefix", "order": "recent"},
                     {"query": "al", "match": "prefix", "sessionKeys": ["agent:main:s1"]},
                     {"query": "al", "match": "prefix", "role": "user"}):
            await engine.search(body)
        assert prefix_calls == {"answered": 0, "fell_back": 0}
        await _same_both_ways(engine, {"query": "al", "match": "prefix"})
        assert prefix_calls == {"answered": 1, "fell_back": 0}
        await engine.search({"query": "zq", "match": "prefix"})  # no postings for it
        assert prefix_calls == {"answered": 1, "fell_back": 1}


async def test_past_the_log_limit_prefixes_are_searched_with_fts5_alone(tmp_path, prefix_calls, monkeypatch):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=6)
        await engine.optimize(min_docs=10_000)
        monkeypatch.setattr(sqlite_prefixes, "LOG_LIMIT", 5)
        await engine.search({"query": "al", "match": "prefix"})  # the store learns there is no backlog
        await engine.append("agent:main:late", chain("late", [("user", "alpha beta")] * 3))
        await _same_both_ways(engine, {"query": "al", "match": "prefix"})
        assert prefix_calls == {"answered": 1, "fell_back": 0}  # 3 rows indexed since the build: within
        await _corpus(engine, sessions=1, seed=9, name="more")  # 27: past it
        await _same_both_ways(engine, {"query": "al", "match": "prefix"})
        assert prefix_calls == {"answered": 1, "fell_back": 1}


async def test_incremental_builds_redo_the_prefixes_only_when_they_need_it(tmp_path, prefix_calls, monkeypatch):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=6)
        store = await engine.store("main")
        assert (await store.optimize(min_docs=10_000, incremental=True))["prefixes"]["count"] >= 5  # none yet
        assert (await store.optimize(min_docs=10_000, incremental=True))["prefixes"] is None  # usable: kept
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) is None
        monkeypatch.setattr(sqlite_prefixes, "LOG_LIMIT", 10)
        monkeypatch.setattr(postings_due_module, "PREFIX_LOG_LIMIT", 10)
        await engine.append("agent:main:late", chain("late", [("user", "alpha beta")] * 6))  # half the budget
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) == "stale"
        assert (await store.optimize(min_docs=10_000, incremental=True))["prefixes"]["count"] >= 5
        assert await store.postings_due(min_docs=10_000, grow_share=0.2) is None
