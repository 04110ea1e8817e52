"""The least a Python answer to a rare word can cost, next to bare FTS5 and to ours.

    .venv/bin/python bench/bench_floor.py [--reps 200]   (after bench/bench_search.py built its data)

The issue's target puts every query class within 1.3x of bare FTS5's `MATCH … ORDER BY bm25 LIMIT
26` through aiosqlite. For a rare word that statement takes ~0.1-0.2 ms, so the target leaves
~0.05 ms for everything else. This measures a floor: one aiosqlite round trip that ranks and
fetches the texts in the same statement, then snippets and the JSON of the hits, with no scoping,
visibility, dirty-window check or tie rule; beside it the bare statement alone, the same statement
fetching the texts, and `Engine.search`. Both connections map their database, as a quiet reader
does. Figures go to bench/results/floor.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import aiosqlite

from sessionsearch.protocol import SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import BARE_SQL, built_data, pick_words  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.search.text import snippet  # noqa: E402
from sessionsearch.store.sqlite.fts import quote  # noqa: E402

HERE = Path(__file__).resolve().parent
OURS_SQL = "SELECT rowid, bm25(msg_fts), ts, mid, text FROM msg_fts WHERE msg_fts MATCH ? ORDER BY bm25(msg_fts) LIMIT 26"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--out", default=str(HERE / "results" / "floor.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    work = built_data(args.messages)
    words = pick_words(work / "bare.db", args.messages)["rare"]
    data = work / "data"
    ours = await aiosqlite.connect(data / "agents" / "main.db")
    bare = await aiosqlite.connect(work / "bare.db")
    for conn in (ours, bare):
        await conn.execute("PRAGMA mmap_size = 2147418112")
    times: dict[str, list[float]] = {"bare_statement": [], "statement_with_texts": [], "floor_answer": [],
                                     "engine_search": []}
    async with Engine(data, settings=Settings(data_dir=str(data))) as engine:
        for _ in range(args.reps):
            for word in words:
                match = quote(word)
                t = time.perf_counter()
                await bare.execute_fetchall(BARE_SQL, (match,))
                times["bare_statement"].append(time.perf_counter() - t)
                t = time.perf_counter()
                await ours.execute_fetchall(OURS_SQL, (match,))
                times["statement_with_texts"].append(time.perf_counter() - t)
                t = time.perf_counter()
                rows = await ours.execute_fetchall(OURS_SQL, (match,))
                json.dumps({"results": [
                    {"sessionKey": "agent:main:x", "sessionId": "x", "messageId": mid, "role": "user", "timestamp": ts,
                     "snippet": snippet(text, [word], max_units=300, prefix_last=False), "score": round(-rank, 6)}
                    for _rid, rank, ts, mid, text in rows]}, ensure_ascii=False)
                times["floor_answer"].append(time.perf_counter() - t)
                t = time.perf_counter()
                await engine.search(SearchParams.of({"query": word, "limit": 25}))
                times["engine_search"].append(time.perf_counter() - t)
    await ours.close()
    await bare.close()
    base = statistics.median(times["bare_statement"])
    report = {"words": words, "reps": args.reps, **{
        name: {"p50_ms": statistics.median(v) * 1000, "ratio_p50": statistics.median(v) / base}
        for name, v in times.items()}}
    for name, row in report.items():
        if isinstance(row, dict):
            print(f"{name:>22}: p50 {row['p50_ms']:.3f} ms  x{row['ratio_p50']:.2f}", file=sys.stderr)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
