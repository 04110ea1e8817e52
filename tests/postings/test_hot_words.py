"""Common words' postings (store/sqlite/postings.py): one-word searches answered from them are the
answers FTS5 alone gives, whatever was written since they were built."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys

import pytest

from sessionsearch.protocol import AppendParams, SearchParams, SessionRef
from sessionsearch.store.sqlite import postings as sqlite_hot
from sessionsearch.store.sqlite import search as store_module

from ..helpers import chain, engine_at, ids, leaf, msg

VOCAB = ["loan", "bank", "rate", "car", "house", "money", "pay", "the", "to", "a"]


@pytest.fixture
def hot_calls(monkeypatch):
    """How often a search was answered from postings (and how often it fell back to FTS5)."""
    calls = {"answered": 0, "fell_back": 0}
    original = store_module.hot_top

    async def counting(*args, **kwargs):
        top = await original(*args, **kwargs)
        calls["answered" if top is not None else "fell_back"] += 1
        return top

    monkeypatch.setattr(store_module, "hot_top", counting)
    return calls


async def _corpus(engine, sessions: int = 24, seed: int = 3, name: str = "s") -> None:
    rng = random.Random(seed)
    for s in range(sessions):
        texts = [("user" if i % 2 == 0 else "assistant",
                  " ".join(rng.choice(VOCAB) for _ in range(rng.choice([1, 2, 3, 8, 20, 40]))))
                 for i in range(30)]
        await engine.append(AppendParams(sessionKey=f"agent:main:{name}{s}", events=chain(f"{name}{s}m", texts, ts=1_000_000 + 1000 * (s % 5))))


async def _without_postings(engine, body: dict) -> dict:
    store = await engine.store("main")
    store._hot_seen = (None, frozenset())  # this one search ranks with FTS5 alone
    return await engine.search(SearchParams.of(body))


async def _same_both_ways(engine, body: dict) -> dict:
    await engine.search(SearchParams.of(body))  # the store learns which words have postings
    hot = await engine.search(SearchParams.of(body))
    assert hot == await _without_postings(engine, body)
    return hot


async def test_one_word_searches_answered_from_postings_equal_fts5_alone(tmp_path, hot_calls):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine)
        built = await engine.optimize(min_docs=50, min_share=0.0)
        assert set(built["agents"]["main"]["words"]) == set(VOCAB)  # each is in 50+ of 720 messages
        for word in ("loan", "THE", "a"):
            for extra in ({"limit": 1}, {"limit": 7}, {"limit": 25}, {"role": "assistant"}):
                body = {"query": word, **extra}
                result = await _same_both_ways(engine, body)
                assert result["results"] and (result.get("truncated") or len(result["results"]) < 25)
        assert hot_calls == {"answered": 23, "fell_back": 0}  # all but the first, which learnt the words
        # not a one-word query, not a plain ASCII word, or a scope narrower than the agent: FTS5
        # alone, as before (postings in the agent's order would pass over most rows of a session)
        for body in ({"query": "loan bank"}, {"query": "loa", "match": "prefix"}, {"query": "loan", "order": "recent"},
                     {"query": "café"}, {"query": "loan", "sessionKeys": ["agent:main:s3", "agent:main:s4"]}):
            await engine.search(SearchParams.of(body))
        assert hot_calls == {"answered": 23, "fell_back": 0}


async def test_rows_written_after_the_build_are_ranked_with_the_rest(tmp_path, hot_calls):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine)
        await engine.optimize(min_docs=50, min_share=0.0)
        # a hit above any of the corpus (the word six times, nothing else), appended after the build
        await engine.append(AppendParams(sessionKey="agent:main:late", events=chain("late", [("user", "car"), ("assistant", " ".join(["loan"] * 6))])))
        result = await _same_both_ways(engine, {"query": "loan", "limit": 3})
        assert ids(result)[0] == "late2"
        # and rows rebuilt by reconciliation after it
        await engine.append(AppendParams(sessionKey="agent:main:imported", events=chain("imp", [("user", " ".join(["loan"] * 12))])), index=False)
        await engine.reconcile_pending()
        assert ids(await _same_both_ways(engine, {"query": "loan", "limit": 3}))[0] == "imp1"
        assert hot_calls["answered"] >= 2


async def test_rewound_and_deleted_rows_never_come_back_from_postings(tmp_path, hot_calls):
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:r", events=chain("r", [("user", "car"), ("user", " ".join(["loan"] * 12)),
                                                        ("assistant", "pay the bank")])))
        await _corpus(engine)
        await engine.optimize(min_docs=50, min_share=0.0)
        assert ids(await _same_both_ways(engine, {"query": "loan", "limit": 1})) == ["r2"]
        # rewind to r1: the branch goes on from there without r2
        await engine.append(AppendParams(sessionKey="agent:main:r", events=[leaf("rl", "r3", "r1"), msg("r4", "user", "car", "rl")]))
        result = await _same_both_ways(engine, {"query": "loan", "limit": 25})
        assert "r2" not in ids(result)
        await engine.delete(SessionRef(sessionKey="agent:main:s0"))
        result = await _same_both_ways(engine, {"query": "loan", "limit": 25})
        assert not any(i.startswith("s0m") for i in ids(result))
        assert hot_calls["answered"] >= 3


async def test_past_the_log_limit_a_word_is_searched_with_fts5_alone(tmp_path, hot_calls, monkeypatch):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=8)
        await engine.optimize(min_docs=20, min_share=0.0)
        monkeypatch.setattr(sqlite_hot, "FRESH_LIMIT", 5)
        await _same_both_ways(engine, {"query": "loan"})
        assert hot_calls == {"answered": 1, "fell_back": 0}
        await _corpus(engine, sessions=1, seed=9, name="more")  # 30 rows indexed since the build
        await _same_both_ways(engine, {"query": "loan"})
        assert hot_calls == {"answered": 1, "fell_back": 2}
        await engine.optimize(min_docs=20, min_share=0.0)  # built again: the log starts over
        await _same_both_ways(engine, {"query": "loan"})
        assert hot_calls == {"answered": 3, "fell_back": 2}


async def test_optimize_drops_words_no_longer_common_and_stops_the_log_with_the_last(tmp_path):
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=8)
        await engine.optimize(min_docs=20, min_share=0.0)
        store = await engine.store("main")
        db = sqlite3.connect(store.path)
        await _corpus(engine, sessions=1, seed=9, name="more")
        assert db.execute("SELECT count(*) FROM index_log").fetchone()[0] == 30
        done = await engine.optimize(min_docs=10_000)
        assert sorted(done["agents"]["main"]["dropped"]) == sorted(VOCAB) and done["agents"]["main"]["words"] == {}
        assert db.execute("SELECT count(*) FROM hot_postings").fetchone()[0] == 0
        assert db.execute("SELECT value FROM meta WHERE key = 'index_log'").fetchone()[0] == 0
        await _corpus(engine, sessions=1, seed=10, name="later")
        assert db.execute("SELECT count(*) FROM index_log").fetchone()[0] == 0  # nothing listed any more
        db.close()


def test_optimize_from_the_command_line(tmp_path):
    import asyncio

    async def fill():
        async with engine_at(tmp_path) as engine:
            await _corpus(engine, sessions=8)
    asyncio.run(fill())
    run = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "optimize", "--data-dir", str(tmp_path),
                          "--min-docs", "20", "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    words = json.loads(run.stdout)["agents"]["main"]["words"]
    assert set(words) == set(VOCAB) and all(w["rows"] >= 20 for w in words.values())
    human = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "optimize", "--data-dir", str(tmp_path),
                            "--min-docs", "20"], capture_output=True, text=True, timeout=120)
    assert human.returncode == 0 and "main: postings for 10 common word(s)" in human.stdout


async def test_the_log_stays_bounded_when_optimize_is_not_run_again(tmp_path, hot_calls, monkeypatch):
    monkeypatch.setattr(sqlite_hot, "FRESH_LIMIT", 40)
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=8)
        await engine.optimize(min_docs=20, min_share=0.0)
        db = sqlite3.connect((await engine.store("main")).path)
        await _corpus(engine, sessions=1, seed=9, name="more")  # 30 rows: within the limit
        assert db.execute("SELECT count(*) FROM index_log").fetchone()[0] == 30
        await _same_both_ways(engine, {"query": "loan"})
        assert hot_calls == {"answered": 1, "fell_back": 0}
        await _corpus(engine, sessions=1, seed=10, name="later")  # 60: past it, the builds are given up
        assert db.execute("SELECT count(*) FROM index_log").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM hot_words WHERE log_seq >= 0").fetchone()[0] == 0
        assert db.execute("SELECT value FROM meta WHERE key = 'index_log'").fetchone()[0] == 0
        await _corpus(engine, sessions=2, seed=11, name="after")
        assert db.execute("SELECT count(*) FROM index_log").fetchone()[0] == 0  # nothing listed any more
        await _same_both_ways(engine, {"query": "loan"})  # FTS5 alone, and right
        assert hot_calls["answered"] == 1
        await engine.optimize(min_docs=20, min_share=0.0)  # built again
        await _same_both_ways(engine, {"query": "loan"})
        assert hot_calls["answered"] == 2
        db.close()


async def test_metrics_show_usable_and_stale_postings_and_the_log(tmp_path, monkeypatch):
    from prometheus_client import CollectorRegistry, generate_latest

    from sessionsearch.metrics import PipelineCollector

    def scrape() -> str:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(PipelineCollector(engine.backend.agent_status))
        return generate_latest(registry).decode()

    monkeypatch.setattr(sqlite_hot, "FRESH_LIMIT", 40)
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, sessions=8)
        assert 'sessionsearch_postings_words{agent="main",state="usable"} 0.0' in scrape()
        await engine.optimize(min_docs=20, min_share=0.0)
        await _corpus(engine, sessions=1, seed=9, name="more")
        text = scrape()
        assert 'sessionsearch_postings_words{agent="main",state="usable"} 10.0' in text
        assert 'sessionsearch_postings_log_rows{agent="main"} 30.0' in text
        await _corpus(engine, sessions=1, seed=10, name="later")  # past the limit
        text = scrape()
        assert 'sessionsearch_postings_words{agent="main",state="stale"} 10.0' in text
        assert 'sessionsearch_postings_log_rows{agent="main"} 0.0' in text


async def test_by_default_words_in_500_rows_get_postings(tmp_path, hot_calls):
    async with engine_at(tmp_path) as engine:
        assert engine.settings.postings_min_docs is None  # the backend's own floor: 500 rows on SQLite
        texts = [("user", "alpha beta" if n < 499 else "alpha gamma") for n in range(520)]
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", texts)))
        built = (await engine.optimize())["agents"]["main"]
        assert set(built["words"]) == {"alpha"} and built["words"]["alpha"]["rows"] == 520  # beta: in 499
        await _same_both_ways(engine, {"query": "alpha"})
        assert hot_calls == {"answered": 1, "fell_back": 0}
