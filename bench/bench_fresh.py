"""Searches right after a live ingest: 200,000 messages appended to one agent, then short
prefixes and a 10% word searched for the next minutes, on both stores, with the postings
built as the embedded `serve` builds them (worker/optimize.py: its checks every
`postings_check_every_s`, each build in a child process at idle priority).

    .venv/bin/python bench/bench_fresh.py [--messages 200000] [--after-s 120] [--stores sqlite postgres]
        [--variants before after] [--pg postgresql://postgres@127.0.0.1:5432/postgres]

Per store and variant, on a fresh data dir (SQLite) or a scratch database (PostgreSQL, dropped
after): bench/corpus.py's messages appended to agent `main` in batches of 100 as fast as the
store takes them (a 3-letter prefix searched every 2 s meanwhile, by a client of its own); from
the moment the last append returns,
for `--after-s` seconds, rounds of: one prefix each of 2, 3, 4 and 5 letters (the one nearest
30% of messages per length), a word in about 10% of messages, and a rare word. Each build's
start, end and what it did are recorded. Per 10-second window: p50/p95 per class, and per class
the first second from which every later window's p95 is under its goal (prefixes 100 ms, the
word 50 ms). At the end the answers are compared with those after a full `optimize`.

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
GOALS_MS = {"prefix": 100.0, "word": 50.0}
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
    """Per prefix length 2-5 the prefix nearest 30% of messages; the word nearest 10%; a rare word."""
    words: Counter[str] = Counter()
    prefixes: Counter[str] = Counter()
    total = 0
    for _, messages in sessions:
        for _, text in messages:
            total += 1
            toks = set(tokens(text))
            words.update(toks)
            prefixes.update({t[:n] for t in toks for n in range(2, 6) if len(t) >= n and t.isascii() and t.isalnum()})
    out: dict[str, dict] = {}
    for n in range(2, 6):
        p, d = min(((p, d) for p, d in prefixes.items() if len(p) == n), key=lambda x: abs(x[1] / total - 0.30))
        out[f"prefix_{n}"] = {"body": {"query": p, "match": "prefix", "limit": 25}, "share": d / total,
                              "goal_ms": GOALS_MS["prefix"]}
    w, d = min(((w, d) for w, d in words.items() if w.isascii()), key=lambda x: abs(x[1] / total - 0.10))
    out["word_10pct"] = {"body": {"query": w, "limit": 25}, "share": d / total, "goal_ms": GOALS_MS["word"]}
    w, d = min(((w, d) for w, d in words.items() if w.isascii() and d >= 20), key=lambda x: x[1])
    out["word_rare"] = {"body": {"query": w, "limit": 25}, "share": d / total, "goal_ms": GOALS_MS["word"]}
    return out


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


def windows(samples: list[tuple[float, str, float]], classes: dict[str, dict]) -> dict:
    """Per class: p50/p95 per window, and the first second from which every later window meets the goal."""
    out: dict = {}
    end = max(t for t, _, _ in samples) if samples else 0.0
    for name, q in classes.items():
        rows = []
        start = 0.0
        while start <= end:
            got = [d for t, c, d in samples if c == name and start <= t < start + WINDOW_S]
            if got:
                rows.append({"from_s": start, "p50_ms": statistics.median(got) * 1000, "p95_ms": pct(got, 0.95) * 1000,
                             "n": len(got)})
            start += WINDOW_S
        met = None
        for i in range(len(rows)):
            if all(r["p95_ms"] < q["goal_ms"] for r in rows[i:]):
                met = rows[i]["from_s"]
                break
        out[name] = {"windows": rows, "goal_ms": q["goal_ms"], "goal_met_from_s": met}
    return out


async def run_store(store: str, variant: str, args, sessions, classes: dict[str, dict]) -> dict:
    name = f"ss_bench_fresh_{secrets.token_hex(3)}"
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
    else:
        settings = Settings(data_dir=str(work))
    import sessionsearch
    out: dict = {"store": store, "variant": variant, "code": str(Path(sessionsearch.__file__).parent.parent)}
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
            print(f"{store}/{variant}: {n} messages appended in {ingest_s:.1f} s", file=sys.stderr)
            out["ingest_s"], out["messages"] = ingest_s, n
            out["during_prefix_3_p95_ms"] = pct([d for _, _, d in during], 0.95) * 1000 if during else None
            t_end = time.perf_counter()
            samples: list[tuple[float, str, float]] = []
            while time.perf_counter() - t_end < args.after_s:
                for cname, q in classes.items():
                    d, _ = await timed_search(engine, q["body"])
                    samples.append((time.perf_counter() - t_end, cname, d))
                await asyncio.sleep(0.05)
            builds.opt.stop()
            out["after"] = windows(samples, classes)
            for cname, row in out["after"].items():
                w = row["windows"]
                print(f"  {cname:>10}: goal met from {row['goal_met_from_s']} s; p95 by window "
                      + " ".join(f"{r['p95_ms']:.0f}" for r in w), file=sys.stderr)
            out["builds"] = [{**e, "start_s": e["start_s"] - ingest_s, "end_s": e["end_s"] - ingest_s}
                             for e in builds.events]  # seconds from the ingest's end (negative: during it)
            before = {c: (await timed_search(engine, q["body"]))[1] for c, q in classes.items()}
            t = time.perf_counter()
            await engine.optimize()
            out["full_optimize_s"] = time.perf_counter() - t
            after = {c: (await timed_search(engine, q["body"]))[1] for c, q in classes.items()}
            out["same_answers_as_after_full_optimize"] = {c: before[c] == after[c] for c in classes}
            print(f"  same answers as after optimize: {out['same_answers_as_after_full_optimize']}", file=sys.stderr)
    finally:
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
    parser.add_argument("--after-s", type=float, default=90.0)
    parser.add_argument("--appenders", type=int, default=4, help="concurrent appenders, each its own sessions")
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--variants", nargs="+", default=["before", "after"])
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
                   "--messages", str(args.messages), "--after-s", str(args.after_s), "--pg", args.pg,
                   "--appenders", str(args.appenders)]
            if variant == "before":
                cmd += ["--code", str(base_tree)]
            subprocess.run(cmd, check=True)
            run = json.loads(part.read_text())
            report["queries"] = run.pop("queries")
            report["runs"].append(run)
            Path(args.out).write_text(json.dumps(report, indent=2))
    report["load_avg_at_end"] = os.getloadavg()
    report["note"] = ("live appends of 100 messages per call into one agent from concurrent appenders; searches "
                      "through the Python API (limit 25) in rounds from the last append's return; builds as the "
                      "embedded serve runs them (in a child at idle priority), the setting defaults of each "
                      "variant's code; shared 2-core machine, other work running (load averages above)")
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
