"""`resultMode: "sessions"` against messages mode on the same queries: a word in 3 sessions of 6,000
matching messages each (every match is in a session of the answer), and the 10% words of
bench_search.py's 200,000-message corpus (matches spread over thousands of sessions).

    .venv/bin/python bench/bench_sessions.py --label after [--reps 20]

Latencies through the Python API, interleaved query by query, the first round not counted. Each
run adds its figures under its label to bench/results/sessions.json (run it on the code before a
change with --label before, then after it, to have both side by side).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from sessionsearch.protocol import AppendParams, SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import build, pick_words, write_offsets  # noqa: E402
from corpus import CorpusSpec  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402

HERE = Path(__file__).resolve().parent
FILLER = "the of report deploy queue window budget meeting server review draft ticket notes plan".split()


async def three_big_sessions(work: Path, per_session: int) -> Path:
    """3 sessions of `per_session` messages, each holding "alpha" among 3-30 filler words."""
    data = work / "data"
    if (work / "built").exists():
        return data
    rng = random.Random(3)
    async with Engine(data, settings=Settings(data_dir=str(data))) as engine:
        for s in range(3):
            parent = None
            for start in range(0, per_session, 200):
                events = []
                for i in range(start, min(start + 200, per_session)):
                    words = rng.choices(FILLER, k=rng.randint(3, 30))
                    words.insert(rng.randrange(len(words) + 1), "alpha")
                    mid = f"s{s}-{i}"
                    events.append({"type": "message", "id": mid, "parentId": parent, "message": {
                        "role": "user" if i % 2 else "assistant", "content": " ".join(words),
                        "timestamp": 1_700_000_000_000 + s * 1_000_000 + i}})
                    parent = mid
                await engine.append(AppendParams(sessionKey=f"agent:main:big{s}", events=events, sessionId=f"w{s}"))
    (work / "built").write_text("ok")
    return data


def corpus_200k(messages: int) -> Path:
    work = HERE / "work" / f"search-{messages}"
    if not (work / "build.json").exists():
        print(f"building {messages:,} messages (bench_search.py's corpus) …", file=sys.stderr)
        built = asyncio.run(build(CorpusSpec(messages=messages, sessions=10_000), work))
        write_offsets(CorpusSpec(messages=messages, sessions=10_000), work)
        (work / "build.json").write_text(json.dumps(built))
    return work


MODES = {
    "messages": {},
    "sessions": {"resultMode": "sessions"},
    "messages_recent": {"order": "recent"},
    "sessions_recent": {"resultMode": "sessions", "order": "recent"},
}


async def measure(data: Path, words: list[str], reps: int) -> dict:
    times: dict[str, list[float]] = {m: [] for m in MODES}
    shapes: dict[str, list] = {m: [] for m in MODES}
    async with Engine(data, settings=Settings(data_dir=str(data))) as engine:
        for rep in range(reps + 1):  # the first round warms the caches and is not counted
            for word in words:
                for mode, extra in MODES.items():
                    t = time.perf_counter()
                    result = await engine.search(SearchParams.of({"query": word, "limit": 25, **extra}))
                    elapsed = (time.perf_counter() - t) * 1000
                    if rep:
                        times[mode].append(elapsed)
                    elif "sessions" in mode:
                        shapes[mode].append([(s["sessionKey"], s["hits"], s["best"]["messageId"])
                                             for s in result["results"]])
    out: dict = {}
    for mode in MODES:
        out[f"{mode}_p50_ms"] = pct(times[mode], 0.5)
        out[f"{mode}_p95_ms"] = pct(times[mode], 0.95)
    out["sessions_answers"] = shapes["sessions"][:1]  # the first word's, to check before = after
    out["sessions_hits_total"] = [sum(h for _, h, _ in answer) for answer in shapes["sessions"]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--per-session", type=int, default=6_000)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--out", default=str(HERE / "results" / "sessions.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    big = asyncio.run(three_big_sessions(HERE / "work" / f"sessions-3x{args.per_session}", args.per_session))
    work = corpus_200k(args.messages)
    common = pick_words(work / "bare.db", args.messages)["common_10pct"]
    figures = {
        "three_sessions": {"sessions": 3, "matches_each": args.per_session, "words": ["alpha"],
                           **asyncio.run(measure(big, ["alpha"], args.reps))},
        "common_10pct": {"messages": args.messages, "words": common,
                         **asyncio.run(measure(work / "data", common, max(1, args.reps // 4)))},
    }
    path = Path(args.out)
    report = json.loads(path.read_text()) if path.exists() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip()
    report["machine"] = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
                         "cpus": os.cpu_count()}
    report[args.label] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
                          "reps": args.reps, **figures}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    for name, fig in figures.items():
        print(f"[{args.label}] {name}: " + ", ".join(
            f"{m} p50 {fig[f'{m}_p50_ms']:.1f} / p95 {fig[f'{m}_p95_ms']:.1f} ms" for m in MODES))
    labels = [k for k in report if k not in ("machine",)]
    if len(labels) > 1:
        print("side by side (sessions p50 / p95 ms): " + "; ".join(
            f"{label}: " + ", ".join(f"{name} {report[label][name]['sessions_p50_ms']:.1f} / "
                                     f"{report[label][name]['sessions_p95_ms']:.1f}" for name in figures)
            for label in labels))


if __name__ == "__main__":
    main()
