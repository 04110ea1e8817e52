"""The search path's fixed cost of checking a request: the declarations (protocol/) next to the parser before them.

    .venv/bin/python bench/bench_doors.py [--reps 20000] [--before 9adee09]

The check is the only part of a search that the declarations changed (the search that runs after
it is the same code), so the two are timed side by side in one process on the same bodies: the
hand-written `parse_search` as it was at commit `--before` (read from git), and
`SearchParams.of(body).request()` now. Then, for scale, a whole `sessions.search` through the
HTTP door's `call` on a small store. Figures (p50 and p95 in microseconds) go to
bench/results/doors.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sessionsearch import Engine, Settings
from sessionsearch import logging as sslogging
from sessionsearch.api.tools import call
from sessionsearch.protocol import AppendParams, SearchParams

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KEY = "agent:main:main"
BODIES: dict[str, dict[str, Any]] = {
    "one word": {"query": "loan"},
    "agent tool": {"query": "loan rate", "limit": 5, "requester": {"sessionKey": KEY, "sandboxed": False}},
    "scoped": {"query": "the loan paperwork", "sessionKeys": [KEY, "agent:main:other"], "role": "user",
               "since": "2026-01-01", "until": 1_800_000_000_000, "match": "prefix"},
    "batch": {"queries": ["loan", "rate", "house"], "resultMode": "sessions", "mode": "keyword"},
}


def parser_before(commit: str) -> Any:
    """`parse_search` from search/query.py as it was at `commit`."""
    source = subprocess.run(["git", "show", f"{commit}:sessionsearch/search/query.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("sessionsearch.search._query_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "sessionsearch.search"
    sys.modules[spec.name] = module
    exec(compile(source, f"{commit}:sessionsearch/search/query.py", "exec"), module.__dict__)
    return module.parse_search


def timed(fn: Any, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e6)
    return out


def figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_us": round(statistics.median(ordered), 2), "p95_us": round(ordered[int(len(ordered) * 0.95)], 2)}


async def end_to_end(reps: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as data:
        async with Engine(data, settings=Settings(data_dir=data, embedder="none")) as engine:
            events = [{"type": "message", "id": f"m{i}", "parentId": f"m{i - 1}" if i else None,
                       "message": {"role": "user" if i % 2 == 0 else "assistant",
                                   "content": f"note {i} about the loan rate and the house"}} for i in range(200)]
            await engine.append(AppendParams(sessionKey=KEY, events=events))
            out = {}
            for name in ("one word", "agent tool"):
                body = BODIES[name]
                for _ in range(200):
                    await call(engine, "sessions.search", body)
                samples = []
                for _ in range(reps):
                    start = time.perf_counter()
                    await call(engine, "sessions.search", body)
                    samples.append((time.perf_counter() - start) * 1e6)
                out[name] = figures(samples)
            return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20_000)
    ap.add_argument("--before", default="9adee09", help="the commit whose parse_search to compare with")
    args = ap.parse_args()
    sslogging.configure("WARNING")
    before = parser_before(args.before)
    results: dict[str, Any] = {"reps": args.reps, "before": args.before, "check": {}}
    gc.disable()
    for name, body in BODIES.items():
        new = lambda: SearchParams.of(body).request()  # noqa: E731
        old = lambda: before(body)  # noqa: E731
        for fn in (old, new):
            timed(fn, 2000)  # warm
        # interleaved rounds, so that a neighbour's load falls on both alike
        old_s: list[float] = []
        new_s: list[float] = []
        for _ in range(10):
            old_s += timed(old, args.reps // 10)
            new_s += timed(new, args.reps // 10)
        row = {"before": figures(old_s), "declarations": figures(new_s)}
        row["p50_delta_us"] = round(row["declarations"]["p50_us"] - row["before"]["p50_us"], 2)
        results["check"][name] = row
        print(f"{name:>10}: before p50 {row['before']['p50_us']:6.2f} us p95 {row['before']['p95_us']:6.2f}  |  "
              f"declarations p50 {row['declarations']['p50_us']:6.2f} us p95 {row['declarations']['p95_us']:6.2f}"
              f"  |  p50 delta {row['p50_delta_us']:+.2f} us")
    gc.enable()
    results["search_through_call"] = asyncio.run(end_to_end(max(args.reps // 10, 500)))
    for name, row in results["search_through_call"].items():
        print(f"whole sessions.search ({name}) through call(): p50 {row['p50_us']:.1f} us p95 {row['p95_us']:.1f} us")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "doors.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
