"""Searches right after a write, PostgreSQL: every query class of bench_pg.py, each search
preceded by an append of one message to the same agent (what a gateway streaming its transcripts
does between an agent's searches), with the phrase counts taken from the postings (schema
migration 10) and, side by side, counted through the GIN index as before it.

    .venv/bin/python bench/bench_pg_writes.py --database-url postgresql://…/ss_bench_ours_xxxx \
        --words-from bench/results/pg.json [--reps 10]

The database is one `bench_pg.py --keep` left (agent main, reconciled, postings built); the words
are that run's. A write moves the index state every kept count is checked against, so each search
counts its phrases again: a word the postings hold is counted from them (the build's count plus
the rows written since that hold it), any other through the GIN index. The "gin" variant passes no
postings key (Query._postings_key answers None), so every phrase is counted through the GIN index,
as every search did after a write before migration 10. The two variants alternate query by query.
Figures (p50/p95 per class and variant) go to bench/results/<out>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

from sessionsearch.protocol import AppendParams, SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pg import BASE_TS, classes_for  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.store.postgres import query as pg_search  # noqa: E402

HERE = Path(__file__).resolve().parent


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True, help="a database bench_pg.py --keep left (agent main)")
    parser.add_argument("--words-from", required=True, help="that run's JSON (its `words`)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", default="pg_writes")
    args = parser.parse_args()
    sslogging.configure("WARNING")
    words = {k: list(v) for k, v in json.loads(Path(args.words_from).read_text())["words"].items()}
    classes = classes_for(words)
    real = pg_search.Query._postings_key
    variants = {"postings": real, "gin": lambda self, i: None}
    out: dict = {"database": args.database_url.rsplit("/", 1)[1], "reps": args.reps, "cpus": os.cpu_count(),
                 "classes": {}}
    times: dict[str, dict[str, list[float]]] = {c: {v: [] for v in variants} for c in classes}
    n, key = 0, f"agent:main:bench-writes-{int(time.time())}"  # a session of its own: each run's rows are new
    async with Engine(settings=Settings(database_url=args.database_url, data_dir=str(HERE / "work" / "pg-writes"))) as engine:
        for rep in range(args.reps):
            for name, queries in classes.items():
                for body, _, _ in queries:
                    for variant in (variants if rep % 2 == 0 else dict(reversed(variants.items()))):
                        n += 1
                        await engine.append(AppendParams(sessionKey=key, events=[
                            {"type": "message", "id": f"bw{n}", "parentId": f"bw{n - 1}" if n > 1 else None,
                             "message": {"role": "user", "content": f"a written line {n}",
                                         "timestamp": BASE_TS + 10 ** 10 + n}}]))
                        pg_search.Query._postings_key = variants[variant]
                        try:
                            t = time.perf_counter()
                            await engine.search(SearchParams.of({**body, "agentId": "main", "limit": 25}))
                            times[name][variant].append(time.perf_counter() - t)
                        finally:
                            pg_search.Query._postings_key = real
    for name, by in times.items():
        row = {f"{v}_p50_ms": statistics.median(t) * 1000 for v, t in by.items()}
        row.update({f"{v}_p95_ms": pct(t, 0.95) * 1000 for v, t in by.items()})
        out["classes"][name] = row
        print(f"{name:22s} postings p50 {row['postings_p50_ms']:7.2f} p95 {row['postings_p95_ms']:7.2f} | "
              f"gin p50 {row['gin_p50_ms']:7.2f} p95 {row['gin_p95_ms']:7.2f} ms", file=sys.stderr)
    out["loadavg_1m"] = os.getloadavg()[0]
    (HERE / "results" / f"{args.out}.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
