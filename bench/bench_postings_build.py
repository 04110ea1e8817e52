"""Searches beside a postings build: none, in this process (a thread), or in a child at idle priority.

    .venv/bin/python bench/bench_postings_build.py [--messages 200000] [--seconds 20]

On a copy of bench_search.py's store: two-word searches (never answered from postings, so the
build cannot speed them up as it goes) through the Python API, each next to the same query on
the bare FTS5 table, interleaved, while (1) nothing else runs, (2) a build from scratch runs on a
thread of this process at normal priority (the embedded `serve` before: the build's Python work
shares the interpreter with the searches' event loop), (3) the same build runs in a child
process at idle priority (worker/optimize.py, as the embedded `serve` now does it). Each
build's wall time and what it built are recorded. Figures go to bench/results/postings_build.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import statistics
import sys
import threading
import time
from pathlib import Path

import aiosqlite

from sessionsearch.protocol import SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import BARE_SQL, built_data, pick_words  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.store.sqlite.fts import quote  # noqa: E402
from sessionsearch.worker.optimize import build, build_in_child  # noqa: E402

HERE = Path(__file__).resolve().parent


def _drop_postings(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM hot_postings")
        conn.execute("DELETE FROM hot_words")
        conn.execute("DELETE FROM index_log")
        conn.execute("UPDATE meta SET value = 0 WHERE key = 'index_log'")
        conn.execute("DELETE FROM meta WHERE key = 'hot_built_rows'")
    with sqlite3.connect(db) as conn:
        conn.execute("VACUUM")


async def _searches(engine: Engine, bare, queries: list[tuple[str, str]], until: threading.Event | float) -> dict:
    ours, bare_t = [], []
    i = 0
    while (time.monotonic() < until) if isinstance(until, float) else not until.is_set():
        query, match = queries[i % len(queries)]
        i += 1
        t = time.perf_counter()
        await engine.search(SearchParams.of({"query": query, "limit": 25}))
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        await bare.execute_fetchall(BARE_SQL, (match,))
        bare_t.append(time.perf_counter() - t)
    row = {"searches": len(ours), "ours_p50_ms": statistics.median(ours) * 1000, "ours_p95_ms": pct(ours, 0.95) * 1000,
           "bare_p50_ms": statistics.median(bare_t) * 1000, "bare_p95_ms": pct(bare_t, 0.95) * 1000}
    row["ratio_p50"] = row["ours_p50_ms"] / row["bare_p50_ms"]
    row["ratio_p95"] = row["ours_p95_ms"] / row["bare_p95_ms"]
    return row


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=20.0, help="searching with no build beside")
    parser.add_argument("--out", default=str(HERE / "results" / "postings_build.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    work = built_data(args.messages)
    total = json.loads((work / "build.json").read_text())["messages"]
    words = pick_words(work / "bare.db", total)
    queries = [(f"{a} {b}", f"{quote(a)} AND {quote(b)}") for a, b in zip(words["common_1pct"], words["common_10pct"])]
    copy = work / "postings-build"
    shutil.rmtree(copy, ignore_errors=True)
    with sqlite3.connect(work / "data" / "agents" / "main.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copytree(work / "data", copy)
    db = copy / "agents" / "main.db"
    settings = Settings(data_dir=str(copy))
    report: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "messages": total,
                    "queries": [q for q, _ in queries]}
    for phase in ("quiet", "thread_normal_priority", "child_idle_priority"):
        _drop_postings(db)
        async with Engine(copy, settings=settings) as engine:
            bare = await aiosqlite.connect(work / "bare.db")
            for q, m in queries:  # warm
                await engine.search(SearchParams.of({"query": q, "limit": 25}))
                await bare.execute_fetchall(BARE_SQL, (m,))
            done = threading.Event()
            outcome: dict = {}

            def run_build(kind: str = phase) -> None:
                try:
                    started = time.monotonic()
                    result = (build(settings, None, "normal") if kind == "thread_normal_priority"
                              else build_in_child(settings, None))
                    outcome.update(seconds=time.monotonic() - started, pid=result["pid"],
                                   cpu_priority=result["cpu_priority"],
                                   words=len(result["agents"]["main"]["words"]),
                                   rows=sum(w["rows"] for w in result["agents"]["main"]["words"].values()))
                finally:
                    done.set()

            if phase == "quiet":
                row = await _searches(engine, bare, queries, time.monotonic() + args.seconds)
            else:
                threading.Thread(target=run_build, daemon=True).start()
                row = await _searches(engine, bare, queries, done)
                row["build"] = outcome
            await bare.close()
        report[phase] = row
        print(f"{phase:>22}: ours p50 {row['ours_p50_ms']:6.2f} p95 {row['ours_p95_ms']:6.2f} ms | bare p50 "
              f"{row['bare_p50_ms']:6.2f} p95 {row['bare_p95_ms']:6.2f} | x{row['ratio_p50']:.2f} p50, "
              f"x{row['ratio_p95']:.2f} p95 | {row['searches']} searches {row.get('build', '')}", file=sys.stderr)
    shutil.rmtree(copy, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
