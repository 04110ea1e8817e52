"""Long queries (a pasted paragraph, stack trace or error message) at 200,000 messages, on both stores,
as the bare engine answers them and as the service does.

    .venv/bin/python bench/bench_long_query.py [--messages 200000] [--reps 10] [--stores sqlite postgres]
        [--pg postgresql://postgres@127.0.0.1:5432/postgres] [--out long-query]

Per store, one agent `main` holding bench/corpus.py's messages (bench_fresh.py's corpus and events,
appended in batches of 100, then `optimize` as the worker runs it) and 16 pasted paragraphs: messages
of 800 words and of 60 words drawn from the same Zipf vocabulary (mostly common words, some rare), each
in a session of its own. Then, each timed `--reps` times:

- `800 words, found`: the text of one of the 800-word messages, whose hit is that message;
- `800 words, nothing`: another draw of 800 words, which no message holds all of;
- `60 words, found`: the text of a 60-word message;
- `batch of 8`: a `queries` batch of eight 800-word queries (four found, four not), its whole time (each
  query is its own statement, so no connection is held longer than this);
- `operator beside`: one-word searches while another client sends 800-word queries over and over,
  beside the same searches with nothing else running.

`bare`: the plain all-words query on the store's file or database: SQLite's `MATCH` of every quoted
term `ORDER BY bm25 LIMIT 26` (sqlite3 module, on the agent's file); PostgreSQL's `tsv @@ tsquery`
of every phrase (the GIN index), the matching rows' ids. `service`: Engine.search. Figures are
printed and written to bench/results/long-query.json; a store's error (a query refused) is recorded
as such.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from sessionsearch.protocol import AppendParams, SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fresh import corpus, events_for  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.search.query import parse_query  # noqa: E402
from sessionsearch.store.postgres.lexemes import query_phrases  # noqa: E402
from sessionsearch.store.postgres.query import tsquery_text  # noqa: E402
from sessionsearch.store.sqlite.fts import fts5_match  # noqa: E402

HERE = Path(__file__).resolve().parent
PASTED = 8  # 800-word and as many 60-word messages


def paragraphs(sessions: list[tuple[int, list[tuple[str, str]]]], rng: random.Random, words: int,
               n: int) -> list[str]:
    """`n` texts of `words` words drawn from the words of the corpus as they occur (so mostly common
    ones), 2% of them (at least one) any distinct word of the corpus (mostly rare). An 800-word text
    fits in a query's 4,096 units: its drawn words have at most 4 letters, its rare ones at most 7."""
    seen = [w for _, texts in sessions[:2000] for _, text in texts for w in text.split() if text.isascii()]
    short = [w for w in seen if len(w) <= 4] if words > 100 else seen
    rare = sorted({w for w in seen if len(w) <= 7})
    out = []
    for _ in range(n):
        picked = [rng.choice(short) for _ in range(words - max(1, words // 50))]
        picked += rng.sample(rare, max(1, words // 50))
        rng.shuffle(picked)
        out.append(" ".join(picked))
    return out


def ms(xs: list[float]) -> dict[str, float]:
    return {"p50": round(pct(xs, 0.5) * 1000, 2), "p95": round(pct(xs, 0.95) * 1000, 2),
            "max": round(max(xs) * 1000, 2)}


async def service(engine: Engine, body: dict[str, Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    try:
        answer: Any = await engine.search(SearchParams.of(body))
    except Exception as e:  # a refused query: recorded, not timed
        return time.perf_counter() - started, f"{type(e).__name__}: {e}"
    return time.perf_counter() - started, answer


def bare_sqlite(path: Path) -> Any:
    conn = sqlite3.connect(path)

    def run(query: str) -> tuple[float, list[int]]:
        parsed = parse_query(query, prefix=False)
        assert parsed.match is not None
        started = time.perf_counter()
        rows = conn.execute("SELECT rowid FROM msg_fts WHERE msg_fts MATCH ? ORDER BY bm25(msg_fts) LIMIT 26",
                            (fts5_match(parsed.match),)).fetchall()
        return time.perf_counter() - started, [r[0] for r in rows]
    return run


def bare_postgres(url: str) -> Any:
    import psycopg
    conn = psycopg.connect(url, autocommit=True)

    def run(query: str) -> tuple[float, list[int]]:
        parsed = parse_query(query, prefix=False)
        assert parsed.match is not None
        phrases, prefix = query_phrases(parsed.match.words, False)
        started = time.perf_counter()
        rows = conn.execute("SELECT id FROM ss_index WHERE tsv @@ %s::tsquery LIMIT 26",
                            (tsquery_text(phrases, prefix),)).fetchall()
        return time.perf_counter() - started, [r[0] for r in rows]
    return run


async def run_store(store: str, args: argparse.Namespace, sessions: list, queries: dict[str, Any]) -> dict:
    work = HERE / "work" / "long-query" / store
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    name = f"ss_bench_long_{secrets.token_hex(3)}"
    url = args.pg.rsplit("/", 1)[0] + "/" + name
    if store == "postgres":
        import psycopg
        with psycopg.connect(args.pg, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        settings = Settings(database_url=url, data_dir=str(work), **args.limits)
    else:
        settings = Settings(data_dir=str(work), **args.limits)
    out: dict[str, Any] = {}
    try:
        async with Engine(settings=settings) as engine:
            t0 = time.perf_counter()
            for number, texts in sessions:
                events = events_for(number, texts)
                for start in range(0, len(events), 100):
                    await engine.append(AppendParams(sessionKey=f"agent:main:bench:{number}", events=events[start:start + 100]))
            out["ingest_s"] = round(time.perf_counter() - t0, 1)
            t0 = time.perf_counter()
            await engine.optimize()
            out["optimize_s"] = round(time.perf_counter() - t0, 1)
            print(f"{store}: built in {out['ingest_s']} s, optimized in {out['optimize_s']} s", file=sys.stderr)
            bare = bare_postgres(url) if store == "postgres" else bare_sqlite(next(work.rglob("main.db")))
            results: dict[str, Any] = {}
            for cname, q in queries.items():
                body = {"queries": q} if isinstance(q, list) else {"query": q}
                await service(engine, body)  # warm
                times, bare_times, found, errors = [], [], None, None
                for _ in range(args.reps):
                    d, answer = await service(engine, body)
                    if isinstance(answer, str):
                        errors = answer
                        break
                    times.append(d)
                    states = answer["states"] if "states" in answer else [answer]
                    found = [len(s["results"]) for s in states]
                    elapsed = 0.0
                    for text in q if isinstance(q, list) else [q]:
                        e, _ = bare(text)
                        elapsed += e
                    bare_times.append(elapsed)
                row: dict[str, Any] = {"hits": found}
                if errors:
                    row["error"] = errors[:300]
                else:
                    row["serviceMs"] = ms(times)
                row["bareMs"] = ms(bare_times) if bare_times else ms([bare(t)[0] for t in (
                    q if isinstance(q, list) else [q]) for _ in range(args.reps)])
                results[cname] = row
                print(f"  {cname:>20}: {row}", file=sys.stderr)
            out["queries"] = results
            rng = random.Random(3)
            one_words = [w for _, texts in sessions[:50] for _, text in texts for w in text.split()[:2]]
            idle = [(await service(engine, {"query": rng.choice(one_words)}))[0] for _ in range(args.operator)]
            stop = asyncio.Event()
            sent = [0]

            async def hammer() -> None:
                while not stop.is_set():
                    await service(engine, {"query": queries["800 words, nothing"]})
                    sent[0] += 1
            task = asyncio.create_task(hammer())
            await asyncio.sleep(0)
            beside = [(await service(engine, {"query": rng.choice(one_words)}))[0] for _ in range(args.operator)]
            stop.set()
            await task
            out["operatorOneWord"] = {"idleMs": ms(idle), "besideLongMs": ms(beside), "longSentMeanwhile": sent[0]}
            print(f"  operator one-word: {out['operatorOneWord']}", file=sys.stderr)
    finally:
        if store == "postgres":
            import psycopg
            with psycopg.connect(args.pg, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--operator", type=int, default=100, help="one-word searches per phase")
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--limit", nargs=2, action="append", default=[], metavar=("SETTING", "VALUE"),
                        help="a setting for the run, e.g. search_max_query_terms 100000 (the cap lifted)")
    parser.add_argument("--label", default="after", help="the key of this run in the results file")
    parser.add_argument("--out", default="long-query")
    args = parser.parse_args()
    args.limits = {k: int(v) for k, v in args.limit}
    sslogging.configure("WARNING")
    rng = random.Random(38)
    sessions = corpus(args.messages)
    long_texts = paragraphs(sessions, rng, 800, PASTED)
    short_texts = paragraphs(sessions, rng, 60, PASTED)
    base = len(sessions) + 10
    sessions += [(base + i, [("user", text)]) for i, text in enumerate(long_texts + short_texts)]
    unmatched = paragraphs(sessions, rng, 800, 4)
    queries: dict[str, Any] = {"800 words, found": long_texts[0], "800 words, nothing": unmatched[0],
                               "60 words, found": short_texts[0], "batch of 8": long_texts[1:5] + unmatched}
    path = HERE / "results" / f"{args.out}.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    run: dict[str, Any] = {"messages": args.messages, "reps": args.reps, "settings": args.limits,
                           "distinctWords800": len(set(long_texts[0].split())),
                           "distinctWords60": len(set(short_texts[0].split()))}
    for store in args.stores:
        run[store] = asyncio.run(run_store(store, args, sessions, queries))
    results[args.label] = run
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
