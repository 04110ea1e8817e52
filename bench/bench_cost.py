"""The cost of the worst search the limits let through, and what it leaves the operator, on both stores.

    .venv/bin/python bench/bench_cost.py [--messages 2000] [--rounds 5] [--operator-searches 200]
        [--admin-url postgresql://postgres@127.0.0.1:5432/postgres] [--pool 3]

Per store (SQLite files in a temporary data dir; a fresh PostgreSQL database, dropped after): one
agent with `--messages` messages of random words from a 400-word vocabulary, every message also
holding `loan`. Then:

- each worst request of the former term caps (the widest query of 32 terms they allowed, of rare
  words and of words in half the messages, as messages, prefix and sessions; the widest batch and
  the most copies of the widest query of their 64 terms a request; 4,095 characters of one repeated word; one
  word of as many hyphenated parts and a CJK run of as many character pairs as the query cap) timed
  `--rounds` times as a scoped token sends it (api/tools.run_tool): the slowest is the worst
  request time;
- the operator's one-word searches timed while two scoped tokens send the worst request over and
  over (PostgreSQL with a pool of `--pool` connections): their p50/p95 beside the same searches
  with nothing else running, and how many were refused (none should be).

Figures are printed and written to bench/results/cost.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sessionsearch.protocol import AppendParams, SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.api.tools import run_tool  # noqa: E402
from sessionsearch.auth import OPERATOR, Caller  # noqa: E402
from sessionsearch.identity import Requester  # noqa: E402

HERE = Path(__file__).resolve().parent
VOCAB = [f"w{i}" for i in range(400)]
COMMON = [f"c{i}" for i in range(64)]  # each in about half of the messages: the costliest words to count and rank
KEY = "agent:main:main"


# The term caps every query was held to until every legal query was answered (bench_long_query.py
# measures longer ones): the requests at them, kept for comparison with the earlier figures.
QUERY_TERMS, REQUEST_TERMS = 32, 64


def worst_requests(settings: Settings, rng: random.Random) -> dict[str, dict[str, Any]]:
    """The costliest requests the former caps let through, each at a cap."""
    terms = QUERY_TERMS
    widest = " ".join(rng.sample(VOCAB, terms))
    common = " ".join(COMMON[:terms])
    per_query = REQUEST_TERMS // 8
    copies = REQUEST_TERMS // terms
    return {
        "widest query": {"query": widest},
        "widest query of common words": {"query": common},
        "widest query of common words, prefix": {"query": common, "match": "prefix"},
        "widest query of common words, sessions": {"query": common, "resultMode": "sessions"},
        "widest batch": {"queries": [" ".join(rng.sample(COMMON, per_query)) for _ in range(8)]},
        f"common widest query x{copies}": {"queries": [common] * copies},
        "one word repeated": {"query": ("loan " * 819).strip()},
        f"one word of {terms} hyphenated parts": {"query": "-".join(COMMON[:terms])},
        f"CJK run of {terms + 1}": {"query": ("東京" * terms)[:terms + 1]},
    }


async def fill(engine: Engine, messages: int, rng: random.Random) -> None:
    per_session = 50
    for s in range(0, messages, per_session):
        events, parent = [], None
        for i in range(min(per_session, messages - s)):
            mid = f"s{s}m{i}"
            words = [rng.choice(VOCAB) for _ in range(rng.randint(8, 40))] + [c for c in COMMON if rng.random() < 0.5]
            rng.shuffle(words)
            text = "loan " + " ".join(words) + (" 東京大阪" if i % 3 == 0 else "")
            events.append({"type": "message", "id": mid, "parentId": parent, "timestamp": "2026-01-02T03:04:05Z",
                           "message": {"role": "user" if i % 2 == 0 else "assistant", "content": text,
                                       "timestamp": 1767323045000 + s * 100 + i}})
            parent = mid
        await engine.append(AppendParams(sessionKey=f"agent:main:s{s}", events=events))


async def timed(engine: Engine, body: dict[str, Any], caller: Caller) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    answer = await run_tool(engine, "sessions_search", dict(body), caller)
    return time.perf_counter() - started, answer


async def operator_one_word(engine: Engine, n: int, rng: random.Random) -> tuple[list[float], int]:
    times, refused = [], 0
    for _ in range(n):
        seconds, answer = await timed(engine, {"query": rng.choice(VOCAB)}, OPERATOR)
        times.append(seconds)
        refused += answer.get("status") in ("error", "forbidden")
    return times, refused


async def measure(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(5)
    async with Engine(settings=settings) as engine:
        await fill(engine, args.messages, rng)
        await engine.search(SearchParams(query="loan"))  # warm
        requests = worst_requests(settings, rng)
        scoped = Caller(Requester(KEY, False))
        per_request: dict[str, float] = {}
        errors: dict[str, str] = {}
        for name, body in requests.items():
            slowest = 0.0
            for _ in range(args.rounds):
                seconds, answer = await timed(engine, body, scoped)
                slowest = max(slowest, seconds)
                if answer.get("status") == "error":
                    errors[name] = answer["error"]
            per_request[name] = round(slowest * 1000, 2)
        worst_name = max(per_request, key=lambda k: per_request[k])
        idle, _ = await operator_one_word(engine, args.operator_searches, rng)

        stop = asyncio.Event()
        hammered = 0

        async def hammer(token: int) -> None:
            nonlocal hammered
            caller = Caller(Requester(f"agent:main:s{token}", False))
            while not stop.is_set():
                await timed(engine, requests[worst_name], caller)
                hammered += 1

        hammers = [asyncio.create_task(hammer(t)) for t in (0, 50)]
        await asyncio.sleep(0.05)
        busy, refused = await operator_one_word(engine, args.operator_searches, rng)
        stop.set()
        await asyncio.gather(*hammers)
    return {"worstRequest": worst_name, "worstRequestMs": per_request[worst_name], "requestsMs": per_request,
            "refused": errors,
            "operatorOneWordIdleMs": {"p50": round(pct(idle, 0.5) * 1000, 3), "p95": round(pct(idle, 0.95) * 1000, 3)},
            "operatorOneWordBesideWorstMs": {"p50": round(pct(busy, 0.5) * 1000, 3),
                                             "p95": round(pct(busy, 0.95) * 1000, 3)},
            "operatorRefused": refused, "worstRequestsSentMeanwhile": hammered}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--operator-searches", type=int, default=200)
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--pool", type=int, default=3, help="PostgreSQL connections of the process")
    parser.add_argument("--out", default="cost")
    args = parser.parse_args()
    sslogging.configure("WARNING")
    import psycopg

    defaults = Settings()
    out: dict[str, Any] = {"messages": args.messages, "rounds": args.rounds, "pool": args.pool,
                           "limits": {"search_max_query_terms": QUERY_TERMS,
                                      "search_max_request_terms": REQUEST_TERMS,
                                      "credential_max_concurrent": defaults.credential_max_concurrent}}
    with tempfile.TemporaryDirectory() as tmp:
        out["sqlite"] = asyncio.run(measure(Settings(data_dir=str(Path(tmp) / "sqlite")), args))
        name = f"ss_bench_cost_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = args.admin_url.rpartition("/")[0] + "/" + name
        try:
            out["postgres"] = asyncio.run(measure(Settings(data_dir=str(Path(tmp) / "pg"), database_url=url,
                                                           database_pool_max_connections=args.pool), args))
        finally:
            with psycopg.connect(args.admin_url, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    for store in ("sqlite", "postgres"):
        r = out[store]
        print(f"{store:9} worst legal request {r['worstRequestMs']:8.1f} ms ({r['worstRequest']}); operator one-word "
              f"p95 {r['operatorOneWordIdleMs']['p95']:.2f} ms idle, {r['operatorOneWordBesideWorstMs']['p95']:.2f} ms "
              f"beside two tokens sending it ({r['operatorRefused']} refused)")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"{args.out}.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
