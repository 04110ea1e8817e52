"""Postings for common words built when they pay off: once an import's reconciliation drains,
when the index has grown, only the words that need it, and (embedded `serve`) in a child
process, at idle priority unless it catches up with a large change."""

from __future__ import annotations

import json
import os
import sqlite3

from sessionsearch import Settings
from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.store.postgres import bounds as pg_bounds
from sessionsearch.store.sqlite import bounds as sqlite_bounds
from sessionsearch.store.sqlite.postings import FRESH_LIMIT
from sessionsearch.worker.optimize import PeriodicOptimize

from ..helpers import chain, engine_at, ids, wait_until
from ..server import Server

COMMON = ["apple", "pear"]  # in every message: common at any size


def _texts(n: int, start: int = 0) -> list[tuple[str, str]]:
    return [("user" if i % 2 == 0 else "assistant", f"apple pear word{i % 7} item{i}") for i in range(start, start + n)]


def _hot(db) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT word, docs FROM hot_words"))


async def test_a_build_is_due_once_an_import_drains_and_then_when_the_index_grows(backend, monkeypatch):
    # the score bounds due at every change of the index, on both stores: left at its default, a
    # PostgreSQL fold is due again only once 20 times its duration has passed, which a slow machine
    # may or may not reach before the check below
    monkeypatch.setattr(sqlite_bounds, "FOLD_AFTER", 0)
    monkeypatch.setattr(pg_bounds, "FOLD_AFTER", 0)
    async with engine_at(backend, postings_min_docs=40, postings_grow_share=0.5) as engine:
        assert await engine.postings_due() == {}  # no agent yet
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", _texts(60))), index=False)  # an import: a backlog
        assert await engine.pending() == {"main": [1]}
        assert await engine.postings_due() == {}  # not while the index is being rebuilt
        await engine.reconcile_pending()
        assert await engine.postings_due() == {"main": "first"}
        store = await engine.store("main")
        done = await store.optimize(min_docs=40, min_share=0.0, incremental=True)
        assert set(done["words"]) == set(COMMON) and done["kept"] == 0
        assert await engine.postings_due() == {}
        await engine.append(AppendParams(sessionKey="agent:main:b", events=chain("b", _texts(20, 60))))  # +33%: not yet
        # (nor the score bounds: the writes keep them, store/*/bounds.py)
        assert await engine.postings_due() == {}
        await engine.append(AppendParams(sessionKey="agent:main:c", events=chain("c", _texts(20, 80))))  # +67%
        assert await engine.postings_due() == {"main": "grown"}
        again = await store.optimize(min_docs=40, min_share=0.0, incremental=True)
        if backend.kind == "sqlite":  # exact through the index log: kept, not read again
            assert again["words"] == {} and again["kept"] == 2
        else:  # a PostgreSQL build always redoes the agent (store/postgres/postings_build.py)
            assert set(again["words"]) == set(COMMON)
        assert await engine.postings_due() == {}
        # the answers from postings are those of FTS5 alone
        assert ids(await engine.search(SearchParams(query="apple", limit=25))) == ids(
            await engine.search(SearchParams(query="apple", limit=25, sessionKeys=["agent:main:a", "agent:main:b", "agent:main:c"])))


async def test_words_about_to_lose_their_postings_make_a_build_due(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_bounds, "FOLD_AFTER", 0)  # the score bounds due at every change of the index
    async with engine_at(tmp_path, postings_min_docs=40, postings_grow_share=100.0) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", _texts(60))))
        store = await engine.store("main")
        await store.optimize(min_docs=40, min_share=0.0)
        assert await engine.postings_due() == {}
        await engine.append(AppendParams(sessionKey="agent:main:b", events=chain("b", _texts(1))))  # listed in the index log
        assert await engine.postings_due() == {}  # the score bounds kept by the write
        # as if half the rows a build's log may hold had been indexed since
        await store.execute_write("UPDATE sqlite_sequence SET seq = seq + ? WHERE name = 'index_log'",
                                  (FRESH_LIMIT // 2,))
        assert await engine.postings_due() == {"main": "stale"}
        done = await store.optimize(min_docs=40, min_share=0.0, incremental=True)
        assert set(done["words"]) == set(COMMON)
        assert await engine.postings_due() == {}


async def test_the_embedded_build_runs_in_a_child_process_at_normal_priority_when_it_catches_up(tmp_path):
    # the first build (as the one after an import grew the index) catches up with a large change: at
    # normal priority, where idle priority starved it on a loaded machine; the others at idle
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", _texts(60))), index=False)
        await engine.reconcile_pending()
        settings = engine.settings.replace(postings_min_docs=40, postings_check_every_s=0.1, optimize_every_s=0)
        optimizer = PeriodicOptimize(settings)
        optimizer.start()
        try:
            wait_until(lambda: optimizer.builds, 60, "a postings build")
        finally:
            optimizer.stop()
        (build,) = optimizer.builds
        assert build["due"] == {"main": "first"} and build["pid"] != os.getpid()
        assert build["cpu_priority"] == "normal"
        assert set(build["agents"]["main"]["words"]) == set(COMMON)
        assert set(_hot(tmp_path / "agents" / "main.db")) == set(COMMON)
        stale = PeriodicOptimize(settings).once({"main": "stale"})
        assert stale["cpu_priority"] in ("idle", "nice 19") and stale["pid"] != os.getpid()


def test_serve_builds_postings_after_appends_without_an_optimize(tmp_path):
    server = Server(tmp_path / "data", tmp_path / "serve.log", SESSIONSEARCH_POSTINGS_MIN_DOCS="40",
                    SESSIONSEARCH_POSTINGS_CHECK_EVERY_S="0.2")
    try:
        status, body = server.post("transcript.append",
                                   {"sessionKey": "agent:main:a", "events": chain("a", _texts(60))})
        assert status == 200, body
        db = tmp_path / "data" / "agents" / "main.db"

        def built() -> bool:  # the postings committed, then the child's line in the log
            return set(_hot(db)) == set(COMMON) and "optimize.done" in server.log_path.read_text()

        wait_until(built, 60, lambda: f"the postings and optimize.done: {server.log_path.read_text()[-2000:]}", every=0.1)
    finally:
        server.stop()
    done = [json.loads(line) for line in server.log_path.read_text().splitlines() if "optimize.done" in line]
    assert done and done[0]["why"] == "first" and done[0]["cpu_priority"] == "normal", done
    assert done[0]["pid"] != server.proc.pid  # a child's


async def test_after_a_build_that_read_the_whole_index_the_next_check_comes_at_once(tmp_path):
    # rows written while a catch-up build read may make the next one due now: checked without
    # waiting the checks' interval (an hour here from the first check on)
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", _texts(60))))
    settings = Settings(data_dir=str(tmp_path), postings_min_docs=40, postings_check_every_s=0.1, optimize_every_s=0)
    checks: list[dict[str, str]] = []

    def due() -> dict[str, str]:
        optimizer.check_s = 3600.0
        checks.append({"main": "first"} if not checks else {})
        return checks[-1]

    optimizer = PeriodicOptimize(settings, due=due)
    optimizer.start()
    try:
        wait_until(lambda: len(checks) >= 2, 60, "the check after the build")
    finally:
        optimizer.stop()
    assert [b["due"] for b in optimizer.builds] == [{"main": "first"}]
