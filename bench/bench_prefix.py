"""Short prefixes (`match: "prefix"`, one word of 2-4 letters) next to bare FTS5, on
bench_search.py's corpus.

    .venv/bin/python bench/bench_prefix.py [--messages 200000] [--reps 20] [--bare-reps 5]

Builds the prefixes' postings (store/sqlite/prefixes.py; the build is timed), then per prefix,
interleaved query by query: our search through the Python API (limit 25) next to bare FTS5's
`"pfx" * ORDER BY bm25 LIMIT 26` on the same texts. Prefixes are picked per length from those
built, at several shares of messages. Each of our answers is checked against FTS5 ranking every
match in the store's own index (same rows, order and bm25). Figures go to bench/results/prefix.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import aiosqlite

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import BARE_SQL, built_data, events_for  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.store.sqlite.prefixes import PrefixTop  # noqa: E402

HERE = Path(__file__).resolve().parent
ORACLE = ("SELECT rowid, bm25(msg_fts) FROM msg_fts WHERE msg_fts MATCH ? "
          "ORDER BY bm25(msg_fts), ts DESC, mid LIMIT 25")


def _summary(values: list[float]) -> dict[str, float]:
    return {"p50_ms": statistics.median(values) * 1000, "p95_ms": pct(values, 0.95) * 1000, "n": len(values)}


def pick_prefixes(db: Path, total: int) -> list[tuple[str, float]]:
    """Per length 2, 3, 4: the built prefixes nearest 95%, 30%, 5% and 1% of messages."""
    conn = sqlite3.connect(db)
    try:
        built = conn.execute("SELECT prefix, docs FROM prefix_words").fetchall()
    finally:
        conn.close()
    out = []
    for n in (2, 3, 4):
        of_len = [(p, d / total) for p, d in built if len(p) == n]
        for share in (0.95, 0.30, 0.05, 0.01):
            if of_len:
                best = min(of_len, key=lambda x: abs(x[1] - share))
                if best not in out:
                    out.append(best)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--bare-reps", type=int, default=5)
    parser.add_argument("--fresh", type=int, default=1000, help="rows appended after the build, then measured again")
    parser.add_argument("--out", default=str(HERE / "results" / "prefix.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    work = built_data(args.messages)
    total = json.loads((work / "build.json").read_text())["messages"]
    data_dir = work / "data"
    db = data_dir / "agents" / "main.db"
    report: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "messages": total}
    async with Engine(data_dir, settings=Settings(data_dir=str(data_dir))) as engine:
        store = await engine.store("main")
        t = time.perf_counter()
        built = await store.optimize(incremental=True)
        report["optimize_s"] = time.perf_counter() - t
        report["prefix_build"] = built["prefixes"]
        print(f"optimize {report['optimize_s']:.1f} s; prefixes {built['prefixes']}", file=sys.stderr)
        (size,) = sqlite3.connect(db).execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'prefix_%'").fetchone()
        report["prefix_tables_mb"] = size / 1e6
        bare = await aiosqlite.connect(work / "bare.db")
        rows: dict = {}
        for prefix, share in pick_prefixes(db, total):
            body = {"query": prefix, "match": "prefix", "limit": 25}
            ours, bare_t = [], []
            await engine.search(body)  # the store learns its state once
            for rep in range(args.reps):
                t = time.perf_counter()
                await engine.search(body)
                ours.append(time.perf_counter() - t)
                if rep < args.bare_reps:
                    t = time.perf_counter()
                    await bare.execute_fetchall(BARE_SQL, (f'"{prefix}" *',))
                    bare_t.append(time.perf_counter() - t)
            async with aiosqlite.connect(db) as conn:
                await conn.execute("BEGIN")
                top = await PrefixTop().top(conn, prefix, 25)
            oracle = sqlite3.connect(db)
            exact = oracle.execute(ORACLE, (f'"{prefix}" *',)).fetchall()
            oracle.close()
            row = {"share": share, "ours": _summary(ours), "bare": _summary(bare_t),
                   "from_postings": top is not None, "exact": top == exact}
            row["ratio_p95"] = row["ours"]["p95_ms"] / row["bare"]["p95_ms"]
            rows[prefix] = row
            print(f"{prefix:>5} ({share:6.1%}): ours p50 {row['ours']['p50_ms']:7.2f} p95 {row['ours']['p95_ms']:7.2f} ms"
                  f" | bare p50 {row['bare']['p50_ms']:8.2f} p95 {row['bare']['p95_ms']:8.2f} ms"
                  f" | postings {row['from_postings']} exact {row['exact']}", file=sys.stderr)
        await bare.close()
        report["prefixes"] = rows
        # rows indexed since the build: each search counts the prefix in their text (scratch table)
        conn = sqlite3.connect(db)
        texts = [t for (t,) in conn.execute("SELECT text FROM events WHERE text IS NOT NULL LIMIT ?", (args.fresh,))]
        conn.close()
        events = events_for(999_999, [("user", t) for t in texts])
        key = f"agent:main:fresh-{time.time_ns()}"
        for start in range(0, len(events), 100):
            await engine.append(key, events[start:start + 100])
        report["fresh_rows"] = len(texts)
        for prefix in rows:
            body = {"query": prefix, "match": "prefix", "limit": 25}
            await engine.search(body)
            ours = []
            for _ in range(max(5, args.reps // 2)):
                t = time.perf_counter()
                await engine.search(body)
                ours.append(time.perf_counter() - t)
            async with aiosqlite.connect(db) as conn:
                await conn.execute("BEGIN")
                top = await PrefixTop().top(conn, prefix, 25)
            oracle = sqlite3.connect(db)
            exact = oracle.execute(ORACLE, (f'"{prefix}" *',)).fetchall()
            oracle.close()
            rows[prefix]["after_fresh"] = {"ours": _summary(ours), "from_postings": top is not None,
                                           "exact": top == exact}
            print(f"{prefix:>5} after {len(texts)} rows: ours p50 {_summary(ours)['p50_ms']:7.2f} "
                  f"p95 {_summary(ours)['p95_ms']:7.2f} ms | postings {top is not None} exact {top == exact}",
                  file=sys.stderr)
    report["note"] = ("p50/p95 through the Python API (limit 25) and bare FTS5 `\"pfx\" * ORDER BY bm25 LIMIT 26`, "
                      "interleaved; shared 2-core machine under load")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
