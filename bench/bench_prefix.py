"""Short prefixes (`match: "prefix"`, one word of 2-4 letters) next to bare FTS5, on
bench_search.py's corpus.

    .venv/bin/python bench/bench_prefix.py [--messages 200000] [--reps 20] [--bare-reps 5]

Builds the prefixes' postings (store/sqlite/prefixes.py; the build is timed), then per prefix,
interleaved query by query: our search through the Python API (limit 25) next to bare FTS5's
`"pfx" * ORDER BY bm25 LIMIT 26` on the same texts. Prefixes are picked per length from those
built, at several shares of messages. Then, on a copy of the store: ours again after 1,000 and
10,000 rows indexed since the build, after whole sessions deleted, after the worker's fold of
those changes (timed, and the fold of 1,000 more rows), and while a writer appends beside the
searches. Each of our answers is checked against FTS5 ranking every match in the store's own
index (same rows, order and bm25). Figures go to bench/results/prefix.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import aiosqlite

from sessionsearch.protocol import AppendParams, SearchParams, SessionRef

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


def exact_now(db: Path, prefix: str, top) -> bool:
    """Whether a ranking from postings equals FTS5 ranking every match of the store's own index."""
    oracle = sqlite3.connect(db)
    try:
        return top == oracle.execute(ORACLE, (f'"{prefix}" *',)).fetchall()
    finally:
        oracle.close()


async def measure_ours(engine, db: Path, prefixes: list[str], reps: int) -> dict:
    """Per prefix: the first search (it reads the index changes since the last one), then `reps`
    more, and whether the postings answered, exactly."""
    rows = {}
    for prefix in prefixes:
        body = {"query": prefix, "match": "prefix", "limit": 25}
        t = time.perf_counter()
        await engine.search(SearchParams.of(body))
        first = time.perf_counter() - t
        ours = []
        for _ in range(reps):
            t = time.perf_counter()
            await engine.search(SearchParams.of(body))
            ours.append(time.perf_counter() - t)
        async with aiosqlite.connect(db) as conn:
            await conn.execute("BEGIN")
            top = await PrefixTop().top(conn, prefix, 25)
        rows[prefix] = {"ours": _summary(ours), "first_ms": first * 1000, "from_postings": top is not None,
                        "exact": top is not None and exact_now(db, prefix, top)}
    return rows


def show(phase: str, rows: dict) -> None:
    for prefix, row in rows.items():
        print(f"{phase:>14} {prefix:>5}: ours p50 {row['ours']['p50_ms']:7.2f} p95 {row['ours']['p95_ms']:7.2f} ms, "
              f"first {row['first_ms']:7.1f} ms | postings {row['from_postings']} exact {row['exact']}",
              file=sys.stderr)


async def append_rows(engine, texts: list[str], tag: str) -> None:
    """`texts` appended as a new session, 100 rows a transaction, each indexed as it is appended."""
    events = events_for(999_999, [("user", t) for t in texts])
    key = f"agent:main:{tag}-{time.time_ns()}"
    for start in range(0, len(events), 100):
        await engine.append(AppendParams(sessionKey=key, events=events[start:start + 100]))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--bare-reps", type=int, default=5)
    parser.add_argument("--fresh", type=int, nargs=2, default=[1_000, 10_000],
                        help="rows indexed since the build at which ours is measured again (cumulative)")
    parser.add_argument("--deletes", type=int, default=1_000, help="rows deleted (whole sessions) after those")
    parser.add_argument("--writes-s", type=float, default=20.0, help="seconds of searches beside a writer")
    parser.add_argument("--out", default=str(HERE / "results" / "prefix.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    work = built_data(args.messages)
    total = json.loads((work / "build.json").read_text())["messages"]
    data_dir = work / "data"
    db = data_dir / "agents" / "main.db"
    report: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "messages": total,
                    "load_avg_at_start": os.getloadavg()}
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
            await engine.search(SearchParams.of(body))  # the store learns its state once
            for rep in range(args.reps):
                t = time.perf_counter()
                await engine.search(SearchParams.of(body))
                ours.append(time.perf_counter() - t)
                if rep < args.bare_reps:
                    t = time.perf_counter()
                    await bare.execute_fetchall(BARE_SQL, (f'"{prefix}" *',))
                    bare_t.append(time.perf_counter() - t)
            async with aiosqlite.connect(db) as conn:
                await conn.execute("BEGIN")
                top = await PrefixTop().top(conn, prefix, 25)
            row = {"share": share, "ours": _summary(ours), "bare": _summary(bare_t),
                   "from_postings": top is not None, "exact": exact_now(db, prefix, top)}
            row["ratio_p95"] = row["ours"]["p95_ms"] / row["bare"]["p95_ms"]
            rows[prefix] = row
            print(f"{prefix:>5} ({share:6.1%}): ours p50 {row['ours']['p50_ms']:7.2f} p95 {row['ours']['p95_ms']:7.2f} ms"
                  f" | bare p50 {row['bare']['p50_ms']:8.2f} p95 {row['bare']['p95_ms']:8.2f} ms"
                  f" | postings {row['from_postings']} exact {row['exact']}", file=sys.stderr)
        await bare.close()
        report["prefixes"] = rows
    await changes_phases(args, work, db, list(rows), report)
    report["load_avg_at_end"] = os.getloadavg()
    report["note"] = ("p50/p95 through the Python API (limit 25) and bare FTS5 `\"pfx\" * ORDER BY bm25 LIMIT 26`, "
                      "interleaved; then, on a copy of the store, ours after rows indexed and deleted since the "
                      "build (the first search after each step timed apart: it reads the changes), after a fold, "
                      "and beside a writer; shared 2-core machine under load")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"figures in {args.out}", file=sys.stderr)


async def changes_phases(args, work: Path, db: Path, prefixes: list[str], report: dict) -> None:
    """On a copy of the store (the corpus stays as built): ours with rows indexed and deleted
    since the prefixes' build, the folds that take them in, and searches beside a writer."""
    copy = work / "prefix-changes"
    shutil.rmtree(copy, ignore_errors=True)
    (copy / "agents").mkdir(parents=True)
    src, dst = sqlite3.connect(db), sqlite3.connect(copy / "agents" / "main.db")
    src.backup(dst)
    src.close()
    dst.close()
    cdb = copy / "agents" / "main.db"
    conn = sqlite3.connect(cdb)
    texts = [t for (t,) in conn.execute("SELECT text FROM events WHERE text IS NOT NULL LIMIT ?",
                                        (args.fresh[1] + 1_000,))]
    phases: dict = {}
    folds: dict = {}
    try:
        async with Engine(copy, settings=Settings(data_dir=str(copy))) as engine:
            store = await engine.store("main")
            await engine.search(SearchParams.of({"query": prefixes[0], "match": "prefix"}))  # the store learns its state once
            done = 0
            for n in args.fresh:
                await append_rows(engine, texts[done:n], f"fresh{n}")
                done = n
                phases[f"appended_{n}"] = await measure_ours(engine, cdb, prefixes, max(5, args.reps // 2))
                show(f"+{n} rows", phases[f"appended_{n}"])
            deleted, keys = 0, []
            for key, messages in conn.execute("SELECT session_key, sum(messages) FROM windows "
                                              "WHERE session_key LIKE 'agent:main:bench:%' GROUP BY session_key "
                                              "ORDER BY session_key DESC"):
                if deleted >= args.deletes:
                    break
                keys.append(key)
                deleted += messages
            for key in keys:
                await engine.delete(SessionRef(sessionKey=key))
            report["deleted_rows"] = deleted
            phases["deleted"] = await measure_ours(engine, cdb, prefixes, max(5, args.reps // 2))
            show(f"-{deleted} rows", phases["deleted"])
            # the fold of every change so far (the worker's incremental build), then of 1,000 more
            for label, extra in (("all_changes", []), ("1000_rows", texts[done:done + 1_000])):
                if extra:
                    await append_rows(engine, extra, "step")
                t = time.perf_counter()
                built = await store.optimize(incremental=True)
                folds[label] = {**(built["prefixes"] or {}), "optimize_s": time.perf_counter() - t,
                                "words_rebuilt": len(built["words"])}
                print(f"fold of {label}: {folds[label]}", file=sys.stderr)
            phases["folded"] = await measure_ours(engine, cdb, prefixes, max(5, args.reps // 2))
            show("folded", phases["folded"])
            phases["beside_writer"], written = await beside_writer(engine, prefixes, texts, args.writes_s)
            report["beside_writer_rows"] = written
            for prefix, row in phases["beside_writer"].items():
                print(f"{'beside writer':>14} {prefix:>5}: ours p50 {row['p50_ms']:7.2f} p95 {row['p95_ms']:7.2f} ms",
                      file=sys.stderr)
            print(f"beside writer: {written} rows appended meanwhile", file=sys.stderr)
    finally:
        conn.close()
        shutil.rmtree(copy, ignore_errors=True)
    report["phases"], report["folds"] = phases, folds


async def beside_writer(engine, prefixes: list[str], texts: list[str], seconds: float) -> tuple[dict, int]:
    """Searches for each prefix in turn while another task appends 10 rows every 50 ms; beside
    them, as the floor that the writer's share of the process and machine sets, an exact search
    for a word in no message (`control`)."""
    stop = asyncio.Event()
    written = 0

    async def writer() -> None:
        nonlocal written
        key = f"agent:main:writer-{time.time_ns()}"
        i = 0
        while not stop.is_set():
            chunk = texts[i % len(texts):i % len(texts) + 10]
            await engine.append(AppendParams(sessionKey=key, events=events_for(888_888, [("user", t) for t in chunk], written)))
            written += len(chunk)
            i += 10
            await asyncio.sleep(0.05)

    task = asyncio.create_task(writer())
    times: dict[str, list[float]] = {p: [] for p in [*prefixes, "control"]}
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            for prefix in prefixes:
                t = time.perf_counter()
                await engine.search(SearchParams.of({"query": prefix, "match": "prefix", "limit": 25}))
                times[prefix].append(time.perf_counter() - t)
                t = time.perf_counter()
                await engine.search(SearchParams.of({"query": "qqqqzzzz", "limit": 25}))
                times["control"].append(time.perf_counter() - t)
    finally:
        stop.set()
        await task
    return {p: _summary(v) for p, v in times.items()}, written


if __name__ == "__main__":
    asyncio.run(main())
