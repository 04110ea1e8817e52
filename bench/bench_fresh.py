"""Searches right after a live ingest and while writes go on, side by side with the barest careful
engine on the same texts in the same run: 200,000 messages appended to one agent, then every
query class searched for the next minute (the just-ingested state), then again while 10
messages a second are appended (the under-writes state), on both stores, with the postings
built as the embedded `serve` builds them (worker/optimize.py: its checks every
`postings_check_every_s`, each build in a child process at idle priority, those catching up with
an import at normal priority).

    .venv/bin/python bench/bench_fresh.py [--messages 200000] [--after-s 60] [--writes-s 60]
        [--stores sqlite postgres] [--variants after] [--pg postgresql://postgres@127.0.0.1:5432/postgres]

Per store and variant, on a fresh data dir (SQLite) or a scratch database (PostgreSQL, dropped
after): bench/corpus.py's messages appended to agent `main` in batches of 100 as fast as the
store takes them (a 3-letter prefix searched every 2 s meanwhile, by a client of its own), and
the same batches written by a thread of their own into the bare engine: one FTS5 table (SQLite),
or one table with a stored `to_tsvector('simple', text)`, a GIN index and an index on ts
(PostgreSQL). From the moment the last append returns, for `--after-s` seconds, then for
`--writes-s` seconds with 10 messages a second appended to both (random sessions), rounds of:
per prefix length 1-8 the prefix nearest 30% of messages (the last word as the palette types
it), words in about 10% and 1% of messages, a rare word, two words, and the 10% word by
`recent`; each of ours next to the bare statement (bm25 / `ts_rank` ORDER BY LIMIT 25; newest
first by rowid / ts for `recent`). Per state (just ingested, under writes, and built: rounds
after a full `optimize` at the end): p50/p95 per class,
ours and bare; per 10-second window the p95s, and per class the first second from which every
later window's p95 is under its goal (prefixes 100 ms, the 10% word 50 ms, `recent` 10 ms). At
the end the answers are compared with those after a full `optimize`.

The variants: `before` runs the code of `--base` (a commit; its `sessionsearch/` tree is
exported to a scratch dir and imported from there), `after` this tree's; each store and variant
in a child process of its own, one after the other in one run. Figures go to
bench/results/fresh.json, or fresh-<messages>.json for another `--messages` (`--out` names another).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import random
import secrets
import shutil
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from sessionsearch.protocol import AppendParams, SearchParams

# `--code DIR`: import sessionsearch from DIR (the `before` variant: the base commit's tree)
# (the editable install's finder, ahead of sys.path, taken out; a build's spawned child runs this
# module first with the same argv, so it imports from DIR too)
CODE = sys.argv[sys.argv.index("--code") + 1] if "--code" in sys.argv else str(Path(__file__).resolve().parent.parent)
if "--code" in sys.argv:
    sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path.insert(0, CODE)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import CorpusSpec, generate  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.text.unicode61 import tokens  # noqa: E402
from sessionsearch.worker.optimize import PeriodicOptimize  # noqa: E402

HERE = Path(__file__).resolve().parent
GOALS_MS = {"prefix": 100.0, "word": 50.0, "recent": 10.0}
PREFIX_LENGTHS = range(1, 9)
WRITES_PER_S = 10.0
WINDOW_S = 10.0


def events_for(session: int, texts: list[tuple[str, str]]) -> list[dict]:
    """bench_search.py's events (not imported from there: it puts this tree first on sys.path)."""
    out, parent = [], None
    for i, (role, text) in enumerate(texts):
        mid = f"s{session}-{i}"
        out.append({"type": "message", "id": mid, "parentId": parent,
                    "message": {"role": role, "content": text, "timestamp": 1_700_000_000_000 + session * 10_000 + i}})
        parent = mid
    return out


def corpus(messages: int) -> list[tuple[int, list[tuple[str, str]]]]:
    return list(generate(CorpusSpec(messages=messages, sessions=max(10, messages // 100))))


def pick_queries(sessions: list[tuple[int, list[tuple[str, str]]]]) -> dict[str, dict]:
    """Per prefix length 1-8 the prefix nearest 30% of messages; the words nearest 10% and 1%, a
    rare word, the two together, and the 10% word by `recent`."""
    words: Counter[str] = Counter()
    prefixes: Counter[str] = Counter()
    total = 0
    for _, messages in sessions:
        for _, text in messages:
            total += 1
            toks = set(tokens(text))
            words.update(toks)
            prefixes.update({t[:n] for t in toks for n in PREFIX_LENGTHS if len(t) >= n and t.isascii() and t.isalnum()})
    out: dict[str, dict] = {}
    for n in PREFIX_LENGTHS:
        p, d = min(((p, d) for p, d in prefixes.items() if len(p) == n), key=lambda x: abs(x[1] / total - 0.30))
        out[f"prefix_{n}"] = {"body": {"query": p, "match": "prefix", "limit": 25}, "share": d / total,
                              "goal_ms": GOALS_MS["prefix"]}

    def nearest(share: float) -> tuple[str, int]:
        return min(((w, d) for w, d in words.items() if w.isascii() and w.isalnum()),
                   key=lambda x: abs(x[1] / total - share))
    w10, d10 = nearest(0.10)
    w1, d1 = nearest(0.01)
    rare, dr = min(((w, d) for w, d in words.items() if w.isascii() and w.isalnum() and d >= 20), key=lambda x: x[1])
    out["word_10pct"] = {"body": {"query": w10, "limit": 25}, "share": d10 / total, "goal_ms": GOALS_MS["word"]}
    out["word_1pct"] = {"body": {"query": w1, "limit": 25}, "share": d1 / total, "goal_ms": None}
    out["word_rare"] = {"body": {"query": rare, "limit": 25}, "share": dr / total, "goal_ms": None}
    out["two_words"] = {"body": {"query": f"{w10} {w1}", "limit": 25}, "share": None, "goal_ms": None}
    out["recent_10pct"] = {"body": {"query": w10, "order": "recent", "limit": 25}, "share": d10 / total,
                           "goal_ms": GOALS_MS["recent"]}
    return out


class Bare:
    """The barest careful engine on the same texts: SQLite, one FTS5 table (unicode61, as ours),
    ranked by bm25; PostgreSQL, a stored tsvector with a GIN index, ranked by `ts_rank`. Writes
    go through a thread of their own (the ingest's appenders do not wait for them); searches are
    timed on a connection of their own."""

    def __init__(self, store: str, target: str) -> None:
        from concurrent.futures import ThreadPoolExecutor
        self.store = store
        self._pool = ThreadPoolExecutor(1)
        self._pending: list = []
        if store == "sqlite":
            import sqlite3
            path = Path(target) / "bare.db"
            setup = sqlite3.connect(path)
            setup.execute("PRAGMA journal_mode=WAL")
            setup.execute("CREATE VIRTUAL TABLE bare USING fts5(text, ts UNINDEXED, tokenize='unicode61')")
            setup.close()
            self._writer = self._pool.submit(lambda: sqlite3.connect(path, check_same_thread=False)).result()
            self._reader = sqlite3.connect(path)
        else:
            import psycopg
            with psycopg.connect(target, autocommit=True) as conn:
                conn.execute("CREATE TABLE bare (id bigserial PRIMARY KEY, ts bigint NOT NULL, text text NOT NULL, "
                             "tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED)")
                conn.execute("CREATE INDEX bare_tsv ON bare USING gin (tsv)")
                conn.execute("CREATE INDEX bare_ts ON bare (ts)")
            self._writer = psycopg.connect(target, autocommit=True)
            self._reader = psycopg.connect(target, autocommit=True)

    def _write(self, rows: list[tuple[int, str]]) -> None:
        if self.store == "sqlite":
            with self._writer:
                self._writer.executemany("INSERT INTO bare (ts, text) VALUES (?, ?)", rows)
        else:
            with self._writer.transaction(), self._writer.cursor() as cur:
                cur.executemany("INSERT INTO bare (ts, text) VALUES (%s, %s)", rows)

    def write(self, events: list[dict]) -> None:
        rows = [(e["message"]["timestamp"], e["message"]["content"]) for e in events]
        self._pending.append(self._pool.submit(self._write, rows))
        self._pending = [f for f in self._pending if not f.done()]

    def drain(self) -> None:
        for f in self._pending:
            f.result()
        self._pending = []

    def search(self, body: dict) -> float:
        """The bare statement for a search body; its seconds."""
        words = [t for t in tokens(body["query"])]
        recent = body.get("order") == "recent"
        t = time.perf_counter()
        if self.store == "sqlite":
            expr = " ".join('"' + w.replace('"', '""') + '"' for w in words) + (" *" if body.get("match") == "prefix" else "")
            order = "rowid DESC" if recent else "bm25(bare)"
            self._reader.execute(f"SELECT rowid, bm25(bare) FROM bare WHERE bare MATCH ? ORDER BY {order} LIMIT 25",
                                 (expr,)).fetchall()
        else:
            q = (" & ".join(words[:-1] + [words[-1] + ":*"]) if body.get("match") == "prefix" else " & ".join(words))
            order = "ts DESC" if recent else "ts_rank(tsv, q) DESC"
            self._reader.execute(f"SELECT id, ts_rank(tsv, q) FROM bare, to_tsquery('simple', %s) q WHERE tsv @@ q "
                                 f"ORDER BY {order} LIMIT 25", (q,)).fetchall()
        return time.perf_counter() - t

    def close(self) -> None:
        self.drain()
        self._pool.submit(self._writer.close).result()
        self._pool.shutdown()
        self._reader.close()


class Builds:
    """PeriodicOptimize as the embedded serve runs it, each build's start and end recorded."""

    def __init__(self, settings: Settings, engine: Engine, t0: float) -> None:
        loop = asyncio.get_running_loop()
        self.events: list[dict] = []
        self.t0 = t0
        # a child at idle priority, as serve builds; code before 5f392e8 built in a thread unless told
        child = {"in_child": True} if "in_child" in inspect.signature(PeriodicOptimize).parameters else {}
        self.opt = PeriodicOptimize(settings, **child, due=lambda: asyncio.run_coroutine_threadsafe(
            engine.postings_due(), loop).result(timeout=60))
        once = self.opt.once

        def timed(due=None):
            start = time.perf_counter()
            result = once(due)
            self.events.append({"start_s": start - self.t0, "end_s": time.perf_counter() - self.t0,
                                "due": due, "agents": {a: {"words": len(d.get("words", {})),
                                                           "prefixes": d.get("prefixes")}
                                                       for a, d in result["agents"].items()}})
            print(f"  build {self.events[-1]}", file=sys.stderr)
            return result
        self.opt.once = timed  # type: ignore[method-assign]


async def timed_search(engine: Engine, body: dict) -> tuple[float, list]:
    t = time.perf_counter()
    out = await engine.search(SearchParams.of(body))
    return time.perf_counter() - t, [(h["messageId"] if "messageId" in h else h.get("id"), h.get("score"))
                                     for h in out["results"]]


Sample = tuple[float, str, float, float]  # (seconds after the ingest, class, ours, bare)


def windows(samples: list[Sample], classes: dict[str, dict]) -> dict:
    """Per class: p50/p95 per window, ours and bare, and the first second from which every later
    window meets the goal."""
    out: dict = {}
    end = max(t for t, _, _, _ in samples) if samples else 0.0
    for name, q in classes.items():
        rows = []
        start = 0.0
        while start <= end:
            got = [(d, b) for t, c, d, b in samples if c == name and start <= t < start + WINDOW_S]
            if got:
                ours, bare = [d for d, _ in got], [b for _, b in got]
                rows.append({"from_s": start, "p50_ms": statistics.median(ours) * 1000, "p95_ms": pct(ours, 0.95) * 1000,
                             "bare_p50_ms": statistics.median(bare) * 1000, "bare_p95_ms": pct(bare, 0.95) * 1000,
                             "n": len(got)})
            start += WINDOW_S
        met = None
        if q["goal_ms"] is not None:
            for i in range(len(rows)):
                if all(r["p95_ms"] < q["goal_ms"] for r in rows[i:]):
                    met = rows[i]["from_s"]
                    break
        out[name] = {"windows": rows, "goal_ms": q["goal_ms"], "goal_met_from_s": met}
    return out


def summary(samples: list[Sample], classes: dict[str, dict]) -> dict:
    """Per class over a state's samples: ours and bare p50/p95 (ms), and the ratio of the p50s."""
    out = {}
    for name in classes:
        got = [(d, b) for _, c, d, b in samples if c == name]
        if got:
            ours, bare = [d * 1000 for d, _ in got], [b * 1000 for _, b in got]
            out[name] = {"p50_ms": statistics.median(ours), "p95_ms": pct(ours, 0.95),
                         "bare_p50_ms": statistics.median(bare), "bare_p95_ms": pct(bare, 0.95), "n": len(got),
                         "p50_ratio": statistics.median(ours) / max(statistics.median(bare), 1e-6)}
    return out


def print_summary(title: str, rows: dict) -> None:
    print(f"  {title}: ours p50/p95 | bare p50/p95 (ms)", file=sys.stderr)
    for name, r in rows.items():
        print(f"    {name:>13}: {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} | {r['bare_p50_ms']:8.1f} {r['bare_p95_ms']:8.1f}"
              f"  x{r['p50_ratio']:.1f}  (n {r['n']})", file=sys.stderr)


async def run_store(store: str, variant: str, args, sessions, classes: dict[str, dict]) -> dict:
    name = f"ss_bench_fresh_prefix_{secrets.token_hex(3)}"
    work = HERE / "work" / "fresh" / f"{store}-{variant}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    admin_url = args.pg
    if store == "postgres":
        import psycopg
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        url = admin_url.rsplit("/", 1)[0] + "/" + name
        settings = Settings(database_url=url, data_dir=str(work))
        bare = Bare(store, url)
    else:
        settings = Settings(data_dir=str(work))
        bare = Bare(store, str(work))
    import sessionsearch
    out: dict = {"store": store, "variant": variant, "code": str(Path(sessionsearch.__file__).parent.parent),
                 "load_avg_at_start": os.getloadavg()}
    try:
        async with Engine(settings=settings) as engine:
            t0 = time.perf_counter()
            builds = Builds(settings, engine, t0)
            builds.opt.start()
            during: list[tuple[float, str, float]] = []
            counted = [0]

            async def lane(part: list) -> None:  # appenders of their own sessions, side by side
                for number, messages in part:
                    events = events_for(number, messages)
                    for start in range(0, len(events), 100):
                        await engine.append(AppendParams(sessionKey=f"agent:main:bench:{number}", events=events[start:start + 100]))
                        bare.write(events[start:start + 100])
                    counted[0] += len(messages)

            async def probe(done: asyncio.Event) -> None:
                # a search every 2 s from a client of its own: in an appender's lane, a search of
                # seconds held that lane back until it was the last one left, appending alone
                while not done.is_set():
                    started = time.perf_counter()
                    d, _ = await timed_search(engine, classes["prefix_3"]["body"])
                    during.append((started - t0, "prefix_3", d))
                    try:
                        await asyncio.wait_for(done.wait(), max(0.0, 2.0 - (time.perf_counter() - started)))
                    except TimeoutError:
                        pass

            lanes = [sessions[i::args.appenders] for i in range(args.appenders)]
            done = asyncio.Event()
            probing = asyncio.create_task(probe(done))
            await asyncio.gather(*(lane(part) for part in lanes))
            done.set()
            await probing
            n = counted[0]
            ingest_s = time.perf_counter() - t0
            await asyncio.to_thread(bare.drain)
            print(f"{store}/{variant}: {n} messages appended in {ingest_s:.1f} s (bare drained "
                  f"{time.perf_counter() - t0 - ingest_s:.1f} s later)", file=sys.stderr)
            out["ingest_s"], out["messages"] = ingest_s, n
            out["during_prefix_3_p95_ms"] = pct([d for _, _, d in during], 0.95) * 1000 if during else None
            t_end = time.perf_counter()
            samples: list[Sample] = []
            writes = {"n": 0, "append_s": []}

            async def writer(stop: asyncio.Event) -> None:
                """10 messages a second, each to one of 50 live sessions, to ours and the bare engine."""
                rng = random.Random(7)
                last: dict[int, str | None] = {}
                i = 0
                while not stop.is_set():
                    started = time.perf_counter()
                    s = rng.randrange(50)
                    mid = f"live{s}-{i}"
                    event = {"type": "message", "id": mid, "parentId": last.get(s),
                             "message": {"role": "user", "content": " ".join(rng.choice(sessions[rng.randrange(len(sessions))][1])[1].split()[:12]),
                                         "timestamp": 1_800_000_000_000 + i}}
                    await engine.append(AppendParams(sessionKey=f"agent:main:live:{s}", events=[event]))
                    bare.write([event])
                    last[s] = mid
                    i += 1
                    writes["n"] += 1
                    writes["append_s"].append(time.perf_counter() - started)
                    try:
                        await asyncio.wait_for(stop.wait(), max(0.0, 1 / WRITES_PER_S - (time.perf_counter() - started)))
                    except TimeoutError:
                        pass

            stop = asyncio.Event()
            writing: asyncio.Task | None = None
            while (elapsed := time.perf_counter() - t_end) < args.after_s + args.writes_s:
                if writing is None and elapsed >= args.after_s:
                    writing = asyncio.create_task(writer(stop))
                for cname, q in classes.items():
                    d, _ = await timed_search(engine, q["body"])
                    samples.append((time.perf_counter() - t_end, cname, d, bare.search(q["body"])))
                await asyncio.sleep(0.05)
            stop.set()
            if writing is not None:
                await writing
            builds.opt.stop()
            out["writes_from_s"] = args.after_s
            out["writes"] = {"messages": writes["n"], "append_p50_ms": statistics.median(writes["append_s"]) * 1000
                             if writes["append_s"] else None}
            out["after"] = windows(samples, classes)
            out["just_ingested"] = summary([x for x in samples if x[0] < args.after_s], classes)
            out["under_writes"] = summary([x for x in samples if x[0] >= args.after_s], classes)
            for cname, row in out["after"].items():
                w = row["windows"]
                print(f"  {cname:>13}: goal met from {row['goal_met_from_s']} s; p95 by window "
                      + " ".join(f"{r['p95_ms']:.0f}" for r in w) + " | bare " + " ".join(f"{r['bare_p95_ms']:.0f}" for r in w),
                      file=sys.stderr)
            print_summary(f"just ingested (0-{args.after_s:.0f} s)", out["just_ingested"])
            print_summary(f"under {WRITES_PER_S:.0f} writes a second ({out['writes']['messages']} appended)",
                          out["under_writes"])
            out["builds"] = [{**e, "start_s": e["start_s"] - ingest_s, "end_s": e["end_s"] - ingest_s}
                             for e in builds.events]  # seconds from the ingest's end (negative: during it)
            before = {c: (await timed_search(engine, q["body"]))[1] for c, q in classes.items()}
            t = time.perf_counter()
            await engine.optimize()
            out["full_optimize_s"] = time.perf_counter() - t
            after = {c: (await timed_search(engine, q["body"]))[1] for c, q in classes.items()}
            out["same_answers_as_after_full_optimize"] = {c: before[c] == after[c] for c in classes}
            print(f"  same answers as after optimize: {out['same_answers_as_after_full_optimize']}", file=sys.stderr)
            built: list[Sample] = []  # the built state, as the goal compares with: the same rounds
            for _ in range(args.built_rounds):
                for cname, q in classes.items():
                    d, _ = await timed_search(engine, q["body"])
                    built.append((0.0, cname, d, bare.search(q["body"])))
            out["built"] = summary(built, classes)
            print_summary("built (after a full optimize, no writes)", out["built"])
            out["load_avg_at_end"] = os.getloadavg()
    finally:
        bare.close()
        if store == "postgres":
            import psycopg
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)
    return out


def export_base(commit: str) -> Path:
    """The `sessionsearch/` tree of `commit`, in a scratch dir (imported by the `before` children)."""
    import subprocess
    root = HERE / "work" / "fresh" / f"base-{commit[:12]}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", commit, "sessionsearch"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return root


async def child(args) -> None:
    sessions = corpus(args.messages)
    classes = pick_queries(sessions)
    out = await run_store(args.one[0], args.one[1], args, sessions, classes)
    out["queries"] = {c: {"query": q["body"]["query"], "share": q["share"], "goal_ms": q["goal_ms"]}
                      for c, q in classes.items()}
    Path(args.child_out).write_text(json.dumps(out))


def main() -> None:
    import subprocess
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--after-s", type=float, default=60.0, help="seconds of searches after the ingest")
    parser.add_argument("--writes-s", type=float, default=60.0, help="then seconds of searches under writes")
    parser.add_argument("--built-rounds", type=int, default=10, help="rounds after a full optimize, at the end")
    parser.add_argument("--appenders", type=int, default=4, help="concurrent appenders, each its own sessions")
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--variants", nargs="+", default=["after"])
    parser.add_argument("--base", default="6a587c3", help="the commit the `before` variant runs")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--out", help="default bench/results/fresh.json, fresh-<messages>.json for other --messages")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # a child: store variant
    parser.add_argument("--code", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sslogging.configure("WARNING")
    if args.out is None:
        suffix = "" if args.messages == parser.get_default("messages") else f"-{args.messages}"
        args.out = str(HERE / "results" / f"fresh{suffix}.json")
    if args.one:
        asyncio.run(child(args))
        return
    base = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", args.base], check=True, capture_output=True,
                          text=True).stdout.strip() if "before" in args.variants else None  # only `before` needs it
    head = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    base_tree = export_base(base) if "before" in args.variants else None
    report: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "messages": args.messages,
                    "cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg(), "appenders": args.appenders,
                    "before_commit": base, "after_commit": head, "runs": []}
    for store in args.stores:
        for variant in args.variants:
            part = HERE / "work" / "fresh" / f"{store}-{variant}.json"
            cmd = [sys.executable, __file__, "--one", store, variant, "--child-out", str(part),
                   "--messages", str(args.messages), "--after-s", str(args.after_s), "--writes-s", str(args.writes_s), "--built-rounds", str(args.built_rounds), "--pg", args.pg,
                   "--appenders", str(args.appenders)]
            if variant == "before":
                cmd += ["--code", str(base_tree)]
            subprocess.run(cmd, check=True)
            run = json.loads(part.read_text())
            report["queries"] = run.pop("queries")
            report["runs"].append(run)
            Path(args.out).write_text(json.dumps(report, indent=2))
    report["load_avg_at_end"] = os.getloadavg()
    report["note"] = ("live appends of 100 messages per call into one agent from concurrent appenders, the same "
                      "batches into the bare engine from a thread; then searches through the Python API (limit 25) "
                      "in rounds from the last append's return, each next to the bare statement, the last "
                      "--writes-s seconds while 10 messages a second are appended to both; builds as the embedded "
                      "serve runs them (in a child at idle priority, a catch-up one at normal), the setting defaults of each variant's code; "
                      "shared 2-core machine, other work running (load averages above and per run)")
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
