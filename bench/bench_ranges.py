"""`since`/`until` and `resultMode: "sessions"` on the store bench_search.py built, next to the same
queries without a range and to bare FTS5 filtering its unindexed ts column.

    .venv/bin/python bench/bench_ranges.py [--messages 200000] [--reps 6]

Ranges cover 1% of the corpus's time span, at five places along it; each word class has five
words (bench_search.pick_words). Latencies through the Python API, interleaved query by query, as wall time and as the
process's CPU time (all threads), which the machine's other load does not inflate.
Then (`--appends N`, 0 to skip) what the index `scope.id_bounds` reads costs the writer: with
`--append-baseline 13`, migration 13's (every event by ts) against the partial index it replaced
(messages only); with `--append-baseline 14`, migration 14's windows by span against none (each
append's UPDATE of its window then writes ts_min, and an index entry). Two agents of one engine,
one rewritten to the baseline, appended alternately in batches of 100 events of which every
other one is a tool result (not indexed, but in migration 13's index), and the indexes' sizes.
Figures go to bench/results/ranges.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiosqlite

from sessionsearch.protocol import AppendParams, SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import built_data, events_for, pick_words  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.store.sqlite.fts import quote  # noqa: E402

HERE = Path(__file__).resolve().parent
BARE_RANGED = "SELECT rowid, bm25(f) FROM f WHERE f MATCH ? AND ts >= ? AND ts < ? ORDER BY bm25(f) LIMIT 26"
PLACES = (0.1, 0.3, 0.5, 0.7, 0.9)
OLD_INDEX = "CREATE INDEX events_by_ts ON events (ts) WHERE text IS NOT NULL"  # migration 8's
# baseline -> (statements rewriting the `old` agent to it, the index measured in `main`, in `old`)
BASELINES = {"13": (["DROP INDEX events_all_by_ts", OLD_INDEX], "events_all_by_ts", "events_by_ts"),
             "14": (["DROP INDEX windows_by_span"], "windows_by_span", None)}


def index_bytes(db: Path, name: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = ?", (name,)).fetchone()[0]


async def append_cost(events: int, baseline: str = "13") -> dict:
    """Append rate and index size, the current schema (`main`) against `baseline` (`old`, see above)."""
    rewrite, main_index, old_index = BASELINES[baseline]
    tmp = Path(tempfile.mkdtemp(prefix="bench_ranges_"))
    try:
        data_dir = tmp / "data"
        settings = Settings(data_dir=str(data_dir))
        async with Engine(data_dir, settings=settings) as engine:
            for agent in ("main", "old"):
                await engine.append(AppendParams(sessionKey=f"agent:{agent}:first", events=events_for(0, [("user", "first")])))
        with sqlite3.connect(data_dir / "agents" / "old.db") as conn:
            for statement in rewrite:
                conn.execute(statement)
        spent = {"main": 0.0, "old": 0.0}
        n = 0
        async with Engine(data_dir, settings=settings) as engine:
            for session in range(1, events // 200 + 1):
                for start in range(0, 200, 100):
                    batch = []
                    for i, event in enumerate(events_for(session, [("user", f"w{session} x{i}")
                                                                   for i in range(start, start + 100)], start)):
                        if i % 2:
                            event["message"]["role"] = "toolResult"
                        batch.append(event)
                    for agent in (("main", "old") if (session + start) % 2 == 0 else ("old", "main")):
                        t = time.perf_counter()
                        await engine.append(AppendParams(sessionKey=f"agent:{agent}:s{session}", events=batch, sessionId=f"{agent}-{session}"))
                        spent[agent] += time.perf_counter() - t
                    n += len(batch)
        agents = data_dir / "agents"
        out = {"baseline": baseline, "events": n, "messages": n // 2,
               "main_batch100_events_per_s": n / spent["main"], "old_batch100_events_per_s": n / spent["old"],
               "index_bytes_main": index_bytes(agents / "main.db", main_index),
               "index_bytes_old": index_bytes(agents / "old.db", old_index) if old_index else 0,
               "db_bytes_main": (agents / "main.db").stat().st_size, "db_bytes_old": (agents / "old.db").stat().st_size}
        out["append_rate_main_vs_old"] = out["main_batch100_events_per_s"] / out["old_batch100_events_per_s"]
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def time_span(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT min(ts), max(ts) FROM events WHERE text IS NOT NULL").fetchone()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--appends", type=int, default=100_000, help="events appended for the writer's cost")
    parser.add_argument("--append-baseline", choices=sorted(BASELINES), default="13")
    parser.add_argument("--queries", type=int, default=1, help="0: the append cost only")
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
        for name in ("rare", "mid_0.3pct", "common_1pct", "common_10pct") if args.queries else ():
            times: dict[str, list[float]] = {m: [] for m in modes} | {"bare_ranged": []}
            cpu: dict[str, list[float]] = {m: [] for m in times}  # all the process's threads: load-proof
            hits: dict[str, list[int]] = {m: [] for m in modes}
            for rep in range(args.reps + 1):  # the first round warms the caches and is not counted
                for word in words[name]:
                    for since, until in ranges:
                        for mode, extra in modes.items():
                            body = {"query": word, "limit": 25, **{k: v for k, v in extra.items() if k != "ranged"}}
                            if extra.get("ranged"):
                                body.update(since=since, until=until)
                            t, c = time.perf_counter(), time.process_time()
                            answer = await engine.search(SearchParams.of(body))
                            spent, used = time.perf_counter() - t, time.process_time() - c
                            if rep:
                                times[mode].append(spent)
                                cpu[mode].append(used)
                                hits[mode].append(len(answer["results"]))
                        t, c = time.perf_counter(), time.process_time()
                        await bare.execute_fetchall(BARE_RANGED, (quote(word), since, until))
                        if rep:
                            times["bare_ranged"].append(time.perf_counter() - t)
                            cpu["bare_ranged"].append(time.process_time() - c)
            row = {"words": words[name]}
            for mode, values in times.items():
                row[f"{mode}_p50_ms"] = statistics.median(values) * 1000
                row[f"{mode}_p95_ms"] = pct(values, 0.95) * 1000
                row[f"{mode}_cpu_p50_ms"] = statistics.median(cpu[mode]) * 1000
                row[f"{mode}_cpu_p95_ms"] = pct(cpu[mode], 0.95) * 1000
                if mode in hits:
                    row[f"{mode}_mean_results"] = statistics.mean(hits[mode])
            results[name] = row
            print(f"{name:>13}: " + " | ".join(f"{m} {row[f'{m}_p50_ms']:.2f}/{row[f'{m}_p95_ms']:.2f} "
                                                f"(cpu {row[f'{m}_cpu_p50_ms']:.2f}/{row[f'{m}_cpu_p95_ms']:.2f})"
                                                for m in times) + "  (p50/p95 ms)", file=sys.stderr)
        await bare.close()
    appends = await append_cost(args.appends, args.append_baseline) if args.appends else None
    if appends:
        print(f"appends: {appends}", file=sys.stderr)
    index = {name: index_bytes(db, name) for name in ("events_all_by_ts", "events_by_ts")}
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "cpus": os.cpu_count()},
        "corpus": {"messages": args.messages, "work": str(work.relative_to(HERE)),
                   "time_span_ms": last - first, "range_width_ms": width, "messages_in_each_range": in_range},
        "first_open_seconds": migrate_s, "index_bytes": index, "reps": args.reps, "classes": results,
        "appends": appends,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"ranges of {width} ms (1% of the span) held {in_range} messages; first open {migrate_s:.2f} s; "
          f"figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
