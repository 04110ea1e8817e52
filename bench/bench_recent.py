"""`order: "recent"` and short prefixes next to bare FTS5, on bench_search.py's corpus.

    .venv/bin/python bench/bench_recent.py [--messages 1000000] [--reps 30]

Interleaved query by query, per word class (rare, 0.3%, 1%, 10% of messages): our `recent`
through the Python API next to bare FTS5's `ORDER BY rowid DESC LIMIT 26` (insertion order, the
floor: FTS5 walks the doclist backwards and stops), and our relevance search next to bare
`ORDER BY bm25 LIMIT 26`, so that a change to `recent` is seen not to cost relevance anything.
Then the sorter statements alone (sqlite3, no Python around them): the time-bounded one
(store/sqlite/recent.py) next to sorting every match by timestamp, as `recent` did before.
Wall time and the process's CPU time are both recorded (on a busy shared machine wall time is
mostly the wait for a core). Figures go to bench/results/recent.json, with the load average at
the end. The first open of a store built before migration 10 applies it; its time is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
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
from sessionsearch.store.sqlite.ranking import TIE_MARGIN, TS_JOIN  # noqa: E402
from sessionsearch.store.sqlite.recent import recent_sorter  # noqa: E402

HERE = Path(__file__).resolve().parent
BARE_RECENT = "SELECT rowid FROM f WHERE f MATCH ? ORDER BY rowid DESC LIMIT 26"
CLASSES = ("rare", "mid_0.3pct", "common_1pct", "common_10pct")


def _summary(values: list[float]) -> dict[str, float]:
    return {"p50_ms": statistics.median(values) * 1000, "p95_ms": pct(values, 0.95) * 1000}


async def measure(engine: Engine, bare_path: Path, words: dict[str, list[str]], reps: int) -> dict:
    bare = await aiosqlite.connect(bare_path)
    out = {}
    for name in CLASSES:
        for order, bare_sql in (("recent", BARE_RECENT), ("relevance", BARE_SQL)):
            times: dict[str, list[float]] = {"ours": [], "bare": [], "ours_cpu": [], "bare_cpu": []}
            for w in words[name]:  # warm both
                await engine.search(SearchParams.of({"query": w, "order": order, "limit": 25}))
                await bare.execute_fetchall(bare_sql, (quote(w),))
            for _ in range(reps):
                for w in words[name]:
                    for side, run in (("ours", engine.search(SearchParams.of({"query": w, "order": order, "limit": 25}))),
                                      ("bare", bare.execute_fetchall(bare_sql, (quote(w),)))):
                        t, cpu = time.perf_counter(), time.process_time()
                        await run
                        times[side].append(time.perf_counter() - t)
                        times[f"{side}_cpu"].append(time.process_time() - cpu)
            ours, bare_s = _summary(times["ours"]), _summary(times["bare"])
            # CPU time of the whole process (the event loop and the SQLite threads): on a shared
            # machine wall time also holds the waits for a core, which CPU time leaves out
            ours_cpu, bare_cpu = _summary(times["ours_cpu"]), _summary(times["bare_cpu"])
            row = {"words": words[name], "ours": ours, "bare": bare_s,
                   "ratio_p50": ours["p50_ms"] / bare_s["p50_ms"],
                   "excess_p50_ms": ours["p50_ms"] - bare_s["p50_ms"],
                   "ours_cpu": ours_cpu, "bare_cpu": bare_cpu,
                   "cpu_ratio_p50": ours_cpu["p50_ms"] / max(bare_cpu["p50_ms"], 1e-3),
                   "cpu_excess_p50_ms": ours_cpu["p50_ms"] - bare_cpu["p50_ms"]}
            out[f"{order}:{name}"] = row
            print(f"{order:>9} {name:>13}: ours p50 {ours['p50_ms']:7.2f} p95 {ours['p95_ms']:7.2f} ms | bare p50 "
                  f"{bare_s['p50_ms']:7.2f} p95 {bare_s['p95_ms']:7.2f} | x{row['ratio_p50']:.2f} "
                  f"(+{row['excess_p50_ms']:.2f} ms) | CPU p50 ours {ours_cpu['p50_ms']:.2f} bare "
                  f"{bare_cpu['p50_ms']:.2f} (+{row['cpu_excess_p50_ms']:.2f} ms)", file=sys.stderr)
    await bare.close()
    return out


def statements(db: Path, words: dict[str, list[str]], reps: int) -> dict:
    """The recent sorter alone: time-bounded against sorting every match (the previous way)."""
    conn = sqlite3.connect(db)
    cte, sorter = recent_sorter(0, "msg_fts", [], TS_JOIN)
    bounded = f"WITH {cte} {sorter}"
    full = (f"SELECT msg_fts.rowid, t.ts FROM msg_fts{TS_JOIN} WHERE msg_fts MATCH :match "
            "ORDER BY t.ts DESC LIMIT :k2")
    out = {}
    for name in CLASSES:
        times: dict[str, list[float]] = {"bounded": [], "sort_every_match": []}
        for _ in range(reps):
            for w in words[name]:
                args = {"match": quote(w), "k2": 25 + TIE_MARGIN, "k1": 27}
                for kind, sql in (("bounded", bounded), ("sort_every_match", full)):
                    t = time.perf_counter()
                    conn.execute(sql, args).fetchall()
                    times[kind].append(time.perf_counter() - t)
        out[name] = {kind: _summary(v) for kind, v in times.items()}
        print(f"statement {name:>13}: bounded p50 {out[name]['bounded']['p50_ms']:7.2f} ms | every match sorted "
              f"p50 {out[name]['sort_every_match']['p50_ms']:7.2f}", file=sys.stderr)
    conn.close()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--out", default=str(HERE / "results" / "recent.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    work = built_data(args.messages)
    total = json.loads((work / "build.json").read_text())["messages"]
    words = pick_words(work / "bare.db", total)
    data_dir = work / "data"
    t = time.perf_counter()
    async with Engine(data_dir, settings=Settings(data_dir=str(data_dir))) as engine:
        store = await engine.store("main")
        open_s = time.perf_counter() - t
        print(f"first open (applies pending migrations): {open_s:.2f} s", file=sys.stderr)
        queries = await measure(engine, work / "bare.db", words, args.reps)
        del store
    sorters = statements(data_dir / "agents" / "main.db", words, max(5, args.reps // 3))
    report = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "messages": total,
              "load_average": os.getloadavg(), "cpus": os.cpu_count(),
              "open_s": open_s, "queries": queries, "statements": sorters}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
