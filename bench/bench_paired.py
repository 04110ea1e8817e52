"""Two checkouts' code in one process, paired (issue 37's check that search figures hold): each
checkout's `sessionsearch/` is copied under another name and both engines open the same corpus
(bench_agents.py's, built first with its --shapes), each search of a class run by one and then
the other in alternating order, their answers compared (they must be equal).

    .venv/bin/python bench/bench_agents.py --shapes 1x4000,200x40 --reps 1   # builds bench/work
    .venv/bin/python bench/bench_paired.py --before ../main --after . [--reps 60]

Per shape, store and class: both p50/p95 (ms) and the p50 ratio after/before; `--cpu` times the
process's CPU instead (the code's own cost, a database server's time left out). Figures go to
bench/results/paired.json under the two checkouts' commits.
"""
import argparse
import asyncio
import importlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLASSES = [(w, m, o) for w, m in [("zephyr", "exact"), ("alpha", "exact"), ("zep", "prefix"), ("alp", "prefix")]
           for o in ("relevance", "recent")]
ARGS = argparse.Namespace()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def one_store(shape, store, packages):
    engines = {}
    work = Path(ARGS.work) / f"agents-{shape}"
    for name, pkg in packages.items():
        kw = {"data_dir": str(work / "data")} if store == "sqlite" else {
            "data_dir": str(work / "pg-data"), "database_url": f"{ARGS.pg.rsplit('/', 1)[0]}/{ARGS.db_prefix}agents_{shape}"}
        engines[name] = await pkg.Engine(settings=pkg.Settings(**kw)).open()
    try:
        for e in engines.values():
            for _ in range(2):
                await e.search(query="report", limit=10)
                for w, m, o in CLASSES:
                    await e.search(query=w, match=m, order=o, limit=10)
        importlib.import_module(f"{packages['after'].__name__}.gcpause").settle()  # as `serve` sets it
        times = {(n, c): [] for n in engines for c in CLASSES}
        clock = time.process_time if ARGS.cpu else time.perf_counter
        for rep in range(ARGS.reps):
            for c in CLASSES:
                order = ("before", "after") if rep % 2 == 0 else ("after", "before")
                answers = {}
                for n in order:
                    t = clock()
                    answers[n] = await engines[n].search(query=c[0], match=c[1], order=c[2], limit=10)
                    times[(n, c)].append((clock() - t) * 1000)
                assert answers["before"] == answers["after"], (shape, store, c)  # the same answer
        out = {}
        for c in CLASSES:
            b, a = times[("before", c)], times[("after", c)]
            out[" ".join(c)] = {"before_p50": round(statistics.median(b), 2), "after_p50": round(statistics.median(a), 2),
                                "before_p95": round(pct(b, 95), 2), "after_p95": round(pct(a, 95), 2),
                                "ratio_p50": round(statistics.median(a) / statistics.median(b), 3)}
        return out
    finally:
        for e in engines.values():
            await e.close()


def commit_of(checkout: Path) -> str:
    return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or "unknown"


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="a checkout of the code before")
    parser.add_argument("--after", default=str(HERE.parent), help="a checkout of the code after (default this one)")
    parser.add_argument("--work", default=str(HERE / "work"), help="bench_agents.py's work folder (its corpora)")
    parser.add_argument("--shapes", default="1x4000,200x40")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--cpu", action="store_true", help="the process's CPU time per search, not wall time")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--db-prefix", default="ss_bench_")
    parser.parse_args(namespace=ARGS)
    root = Path(tempfile.mkdtemp(prefix="paired-"))
    for name in ("before", "after"):
        shutil.copytree(Path(getattr(ARGS, name)) / "sessionsearch", root / f"ss_{name}")
    sys.path.insert(0, str(root))
    import ss_after
    import ss_before
    importlib.import_module("ss_after.logging").configure("WARNING")
    packages = {"before": ss_before, "after": ss_after}
    results = {}
    for shape in ARGS.shapes.split(","):
        for store in ARGS.stores.split(","):
            results[f"{shape} {store}"] = r = await one_store(shape, store, packages)
            ratios = [v["ratio_p50"] for v in r.values()]
            print(shape, store, "geomean p50 ratio after/before", round(statistics.geometric_mean(ratios), 3), flush=True)
            for k, v in r.items():
                print("   ", k, v, flush=True)
    shutil.rmtree(root)
    path = HERE / "results" / "paired.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    saved[f"{commit_of(Path(ARGS.before))}..{commit_of(Path(ARGS.after))}" + (" cpu" if ARGS.cpu else "")] = {
        "reps": ARGS.reps, "figures": results}
    path.write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
