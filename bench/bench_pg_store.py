"""The PostgreSQL store next to the SQLite one, on the same corpus, side by side in one run.

    .venv/bin/python bench/bench_pg_store.py [--messages 50000] [--reps 30]

Builds both stores through `Engine.append` (batches of 100, live indexing), then times searches
through `Engine.search` for words by share of messages (rare, 0.3%, 1%, 10%), two words and a
4-letter prefix, by relevance and by recency; and appends from 4 concurrent clients on
PostgreSQL. Prints medians and p95 with the PG/SQLite ratio and saves bench/results/pg_store.json.
PostgreSQL is the machine's server (127.0.0.1:5432); a database of its own is made and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import psycopg

from sessionsearch.protocol import AppendParams, SearchParams

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from corpus import CorpusSpec, generate  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.text.unicode61 import tokens  # noqa: E402

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
BATCH = 100


def events(prefix: str, texts: list[tuple[str, str]], start: int) -> list[dict]:
    out, parent = [], f"{prefix}-{start - 1}" if start else None
    for i, (role, text) in enumerate(texts, start):
        event = {"type": "message", "id": f"{prefix}-{i}", "timestamp": "2026-01-02T03:04:05Z",
                 "message": {"role": role, "content": text, "timestamp": 1767323045000 + i * 1000}}
        if parent:
            event["parentId"] = parent
        out.append(event)
        parent = f"{prefix}-{i}"
    return out


async def load(engine: Engine, sessions: list[tuple[int, list]]) -> float:
    started = time.perf_counter()
    n = 0
    for number, texts in sessions:
        for start in range(0, len(texts), BATCH):
            await engine.append(AppendParams(sessionKey=f"agent:main:s{number}", events=events(f"s{number}", texts[start:start + BATCH], start)))
            n += len(texts[start:start + BATCH])
    return n / (time.perf_counter() - started)


async def concurrent_appends(engine: Engine, clients: int, batches: int) -> float:
    async def client(c: int) -> None:
        for b in range(batches):
            texts = [("user", f"concurrent client{c} batch{b} message{i} ledger") for i in range(BATCH)]
            await engine.append(AppendParams(sessionKey=f"agent:main:c{c}", events=events(f"c{c}", texts, b * BATCH)))
    started = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    return clients * batches * BATCH / (time.perf_counter() - started)


def pick(sessions: list[tuple[int, list]]) -> dict[str, list[str]]:
    docs = Counter()
    total = 0
    for _, texts in sessions:
        for _, text in texts:
            total += 1
            docs.update(set(tokens(text)))
    by_share = sorted(docs.items(), key=lambda kv: kv[1])

    def near(share: float) -> str:
        target = share * total
        return min((w for w, _ in by_share if w.isascii()), key=lambda w: abs(docs[w] - target))
    rare = [w for w, n in by_share if 5 <= n <= 20 and w.isascii()][0]
    common = near(0.10)
    return {"rare": [rare], "0.3%": [near(0.003)], "1%": [near(0.01)], "10%": [common],
            "two words": [near(0.01), near(0.003)], "prefix": [common[:4]]}


async def time_searches(engine: Engine, classes: dict[str, list[str]], reps: int) -> dict:
    out = {}
    for name, words in classes.items():
        for order in ("relevance", "recent"):
            body = {"query": " ".join(words), "order": order, "limit": 25}
            if name == "prefix":
                body["match"] = "prefix"
            await engine.search(SearchParams.of(body))  # warm
            times = []
            for _ in range(reps):
                started = time.perf_counter()
                await engine.search(SearchParams.of(body))
                times.append((time.perf_counter() - started) * 1000)
            out[f"{name} {order}"] = {"p50": pct(times, 0.5), "p95": pct(times, 0.95)}
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    sslogging.configure("WARNING")
    spec = CorpusSpec(messages=args.messages, sessions=max(10, args.messages // 100), vocabulary=20_000)
    sessions = list(generate(spec))
    classes = pick(sessions)
    name = f"ss_bench_pg_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = ADMIN.rpartition("/")[0] + f"/{name}"
    results: dict = {"messages": sum(len(t) for _, t in sessions), "classes": classes}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with Engine(tmp, settings=Settings(data_dir=tmp)) as sqlite, \
                    Engine(tmp, settings=Settings(data_dir=tmp, database_url=url)) as pg:
                results["append_rate"] = {"sqlite": await load(sqlite, sessions), "postgres": await load(pg, sessions)}
                results["append_rate_4_clients_postgres"] = await concurrent_appends(pg, 4, 25)
                results["append_rate_4_clients_sqlite"] = await concurrent_appends(sqlite, 4, 25)
                results["search_ms"] = {"sqlite": await time_searches(sqlite, classes, args.reps),
                                        "postgres": await time_searches(pg, classes, args.reps)}
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    print(f"{results['messages']} messages; appends/s (one client, batches of {BATCH}): "
          f"SQLite {results['append_rate']['sqlite']:.0f}, PostgreSQL {results['append_rate']['postgres']:.0f}; "
          f"4 clients: SQLite {results['append_rate_4_clients_sqlite']:.0f}, "
          f"PostgreSQL {results['append_rate_4_clients_postgres']:.0f}")
    print(f"{'class':24} {'SQLite p50':>10} {'p95':>8} {'PG p50':>10} {'p95':>8} {'p50 ratio':>10}")
    for key, s in results["search_ms"]["sqlite"].items():
        p = results["search_ms"]["postgres"][key]
        print(f"{key:24} {s['p50']:10.2f} {s['p95']:8.2f} {p['p50']:10.2f} {p['p95']:8.2f} {p['p50'] / s['p50']:10.1f}")
    out = HERE / "results" / "pg_store.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
