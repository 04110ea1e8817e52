"""`since`/`until` and `resultMode: "sessions"` on the store bench_search.py built, next to the same
queries without a range and to bare FTS5 filtering its unindexed ts column.

    .venv/bin/python bench/bench_ranges.py [--messages 200000] [--reps 6]

Ranges cover 1% of the corpus's time span, at five places along it; each word class has five
words (bench_search.pick_words). Latencies through the Python API, interleaved query by query.
Figures go to bench/results/ranges.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import aiosqlite

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import built_data, pick_words  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.store.sqlite.fts import quote  # noqa: E402

HERE = Path(__file__).resolve().parent
BARE_RANGED = "SELECT rowid, bm25(f) FROM f WHERE f MATCH ? AND ts >= ? AND ts < ? ORDER BY bm25(f) LIMIT 26"
PLACES = (0.1, 0.3, 0.5, 0.7, 0.9)


def time_span(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT min(ts), max(ts) FROM events WHERE text IS NOT NULL").fetchone()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--out", default=str(HERE / "results" / "ranges.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    work = built_data(args.messages)
    data_dir = work / "data"
    settings = Settings(data_dir=str(data_dir))
    t = time.perf_counter()
    async with Engine(data_dir, settings=settings) as engine:  # the first open since migration 8 applies it
        migrate_s = time.perf_counter() - t
    db = data_dir / "agents" / "main.db"
    first, last = time_span(db)
    width = (last - first) // 100
    ranges = [(first + int(p * (last - first)), first + int(p * (last - first)) + width) for p in PLACES]
    with sqlite3.connect(db) as conn:
        in_range = [conn.execute("SELECT count(*) FROM events WHERE text IS NOT NULL AND ts >= ? AND ts < ?",
                                 r).fetchone()[0] for r in ranges]
    words = pick_words(work / "bare.db", args.messages)
    modes = {
        "relevance": {}, "relevance_ranged": {"ranged": True},
        "recent": {"order": "recent"}, "recent_ranged": {"order": "recent", "ranged": True},
        "sessions": {"resultMode": "sessions"}, "sessions_ranged": {"resultMode": "sessions", "ranged": True},
    }
    results: dict = {}
    async with Engine(data_dir, settings=settings) as engine:
        bare = await aiosqlite.connect(work / "bare.db")
        for name in ("rare", "mid_0.3pct", "common_1pct", "common_10pct"):
            times: dict[str, list[float]] = {m: [] for m in modes} | {"bare_ranged": []}
            hits: dict[str, list[int]] = {m: [] for m in modes}
            for rep in range(args.reps + 1):  # the first round warms the caches and is not counted
                for word in words[name]:
                    for since, until in ranges:
                        for mode, extra in modes.items():
                            body = {"query": word, "limit": 25, **{k: v for k, v in extra.items() if k != "ranged"}}
                            if extra.get("ranged"):
                                body.update(since=since, until=until)
                            t = time.perf_counter()
                            answer = await engine.search(body)
                            spent = time.perf_counter() - t
                            if rep:
                                times[mode].append(spent)
                                hits[mode].append(len(answer["results"]))
                        t = time.perf_counter()
                        await bare.execute_fetchall(BARE_RANGED, (quote(word), since, until))
                        if rep:
                            times["bare_ranged"].append(time.perf_counter() - t)
            row = {"words": words[name]}
            for mode, values in times.items():
                row[f"{mode}_p50_ms"] = statistics.median(values) * 1000
                row[f"{mode}_p95_ms"] = pct(values, 0.95) * 1000
                if mode in hits:
                    row[f"{mode}_mean_results"] = statistics.mean(hits[mode])
            results[name] = row
            print(f"{name:>13}: " + " | ".join(f"{m} {row[f'{m}_p50_ms']:.2f}/{row[f'{m}_p95_ms']:.2f}"
                                                for m in times) + "  (p50/p95 ms)", file=sys.stderr)
        await bare.close()
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "cpus": os.cpu_count()},
        "corpus": {"messages": args.messages, "work": str(work.relative_to(HERE)),
                   "time_span_ms": last - first, "range_width_ms": width, "messages_in_each_range": in_range},
        "first_open_seconds": migrate_s, "reps": args.reps, "classes": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"ranges of {width} ms (1% of the span) held {in_range} messages; first open {migrate_s:.2f} s; "
          f"figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
