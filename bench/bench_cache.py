"""How readers read: the default (a reader maps the database while it stays unchanged,
`search.readerQuietMmapMb`) next to never mapping, always mapping, and a 32 MiB page cache, while
another process appends at several rates, beside bare FTS5 (with SQLite's defaults, and mapped).

    .venv/bin/python bench/bench_cache.py [--reps 10]   (after bench/bench_search.py built its data)

A reader maps the database after a few searches in a row found nothing committed since its
previous one, and stops at the first change (store/sqlite/store.py). This measures both sides of that:
with no writer, and with a gateway-like writer appending one message per transaction every second,
every 100 ms and every 5 ms. Runs on a copy of the search benchmark's data. Figures go to
bench/results/cache.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import subprocess
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# appends one message per transaction through the product's writer, every `interval` seconds
WRITER = """
import asyncio, sys, time
from sessionsearch import AppendParams, Engine, Settings
from sessionsearch import logging as sslogging
data_dir, interval = sys.argv[1], float(sys.argv[2])
async def main():
    sslogging.configure("WARNING")
    async with Engine(data_dir, settings=Settings(data_dir=data_dir)) as engine:
        i, parent = 0, None
        while True:
            mid = f"w-{i}"
            await engine.append(AppendParams(sessionKey="agent:main:cache-bench:writer", sessionId="cache-writer",
                                             events=[{"type": "message", "id": mid, "parentId": parent, "message": {
                                                 "role": "user", "content": f"steady stream message {i} tastamor",
                                                 "timestamp": 1_800_000_000_000 + i}}]))
            print("x", flush=True) if i == 0 else None
            i, parent = i + 1, mid
            time.sleep(interval)
asyncio.run(main())
"""


RECENT_SQL = "SELECT rowid, ts FROM f WHERE f MATCH ? ORDER BY ts DESC LIMIT 26"


async def phase(engines: dict[str, Engine], bares: dict[str, aiosqlite.Connection], items: list[str], order: str,
                reps: int) -> dict:
    times: dict[str, list[float]] = {name: [] for name in (*engines, *bares)}
    for _ in range(reps):
        for w in items:
            for name, engine in engines.items():
                t = time.perf_counter()
                await engine.search(SearchParams.of({"query": w, "limit": 25, "order": order}))
                times[name].append(time.perf_counter() - t)
            for name, bare in bares.items():
                t = time.perf_counter()
                await bare.execute_fetchall(BARE_SQL if order == "relevance" else RECENT_SQL, (quote(w),))
                times[name].append(time.perf_counter() - t)
    return {name: {"p50_ms": statistics.median(v) * 1000, "p95_ms": pct(v, 0.95) * 1000} for name, v in times.items()}


async def stack_reader(store) -> None:
    """Open one more reader connection on the store (held open while the next one is made)."""
    async with store.reader():
        if len(store._all_readers) < store._max_readers:
            await stack_reader(store)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", default=str(HERE / "results" / "cache.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    work = built_data(args.messages)
    copy = work / "cache-copy"
    shutil.rmtree(copy, ignore_errors=True)
    with sqlite3.connect(work / "data" / "agents" / "main.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copytree(work / "data", copy)
    words = pick_words(work / "bare.db", args.messages)
    def at(**settings) -> Engine:
        return Engine(copy, settings=Settings(data_dir=str(copy), **settings))
    engines = {"default_map_when_quiet": at(), "never_map": at(reader_quiet_mmap_mb=0),
               "always_map": at(reader_mmap_mb=2048), "cache_32mb": at(reader_quiet_mmap_mb=0)}
    for engine in engines.values():
        await engine.__aenter__()
    store = await engines["cache_32mb"].store("main")
    await stack_reader(store)  # open all its readers, then give each the larger cache
    for reader in store._all_readers:
        await reader.conn.execute("PRAGMA cache_size = -32768")
    # bare FTS5 as the target has it (SQLite's defaults), and mapped like a quiet reader
    bares = {"bare": await aiosqlite.connect(work / "bare.db"), "bare_mapped": await aiosqlite.connect(work / "bare.db")}
    await bares["bare_mapped"].execute("PRAGMA mmap_size = 2147418112")
    report: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "machine": {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
                                "cpus": os.cpu_count()},
                    "default_reader_quiet_mmap_mb": Settings().reader_quiet_mmap_mb, "phases": {}}
    try:
        for interval in (None, 1.0, 0.1, 0.005):
            writer = None
            if interval is not None:
                writer = subprocess.Popen([sys.executable, "-c", WRITER, str(copy), str(interval)],
                                          stdout=subprocess.PIPE, cwd=ROOT)
                writer.stdout.readline()  # its first append is in
            name = "no_writer" if interval is None else f"append_every_{int(interval * 1000)}ms"
            report["phases"][name] = {}
            for cls, order in (("mid_0.3pct", "relevance"), ("common_1pct", "relevance"), ("mid_0.3pct", "recent")):
                for engine in engines.values():  # warm: each reader sees the state it will be measured in
                    for w in words[cls]:
                        await engine.search(SearchParams.of({"query": w, "limit": 25, "order": order}))
                row = await phase(engines, bares, words[cls], order, args.reps)
                report["phases"][name][f"{cls}_{order}"] = row
                cells = " | ".join(f"{k} {v['p50_ms']:6.2f}" for k, v in row.items())
                print(f"{name:>20} {cls:>11} {order:>9} p50 ms: {cells}", file=sys.stderr)
            if writer is not None:
                writer.kill()
                writer.wait()
    finally:
        for bare in bares.values():
            await bare.close()
        for engine in engines.values():
            await engine.__aexit__(None, None, None)
        shutil.rmtree(copy, ignore_errors=True)
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"peak RSS {report['peak_rss_mb']:.0f} MB (four engines); figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
