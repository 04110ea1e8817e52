"""HTTP search under concurrent load, next to the same searches through the Python API.

    .venv/bin/python bench/bench_http.py [--seconds 30] [--clients 32] [--phases idle,idle_low,busy] [--quiet-mmap-mb N]

Uses the 1,000,000-message data dir that bench_search.py builds (run it first), on a copy.
Drives `POST /v1/sessions.search` on a real `sessionsearch serve` over loopback with wrk
(`apt-get install wrk`) and 32 connections for 30 s, then the same searches through
`Engine.search` with 32 concurrent tasks for 30 s, with reconciliation idle and then busy (a
worker process reconciling 800,000 freshly imported messages meanwhile). Figures go to
bench/results/http.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import redis

from sessionsearch.protocol import SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipeline import stop, write_state_dir  # noqa: E402
from corpus import CorpusSpec  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.importer import run_import  # noqa: E402

HERE = Path(__file__).resolve().parent
REDIS_URL = "redis://127.0.0.1:6379/9"
WRK_SCRIPT = """
local bodies = {%s}
local n = 0
request = function()
  n = n + 1
  return wrk.format("POST", "/v1/sessions.search", {["Content-Type"] = "application/json"}, bodies[(n %% #bodies) + 1])
end
done = function(summary, latency, requests)
  io.write(string.format("RESULT %%d %%d %%d %%d %%d %%d\\n", summary.requests, summary.errors.status,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), summary.duration))
end
"""


def wrk(url: str, words: list[str], seconds: int, clients: int, work: Path) -> dict:
    bodies = ", ".join(json.dumps(json.dumps({"query": w})) for w in words)
    script = work / "search.lua"
    script.write_text(WRK_SCRIPT % bodies)
    run = subprocess.run(["wrk", "-t2", f"-c{clients}", f"-d{seconds}s", "--latency", "-s", str(script), url],
                         capture_output=True, text=True, timeout=seconds + 60)
    match = re.search(r"RESULT (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)", run.stdout)
    if not match:
        raise RuntimeError(run.stdout + run.stderr)
    requests, errors, p50, p95, p99, duration = map(int, match.groups())
    return {"requests_per_s": requests / (duration / 1e6), "errors": errors, "p50_ms": p50 / 1000,
            "p95_ms": p95 / 1000, "p99_ms": p99 / 1000, "requests": requests}


async def python_api(data: Path, words: list[str], seconds: int, clients: int, redis_url: str | None,
                     quiet_mmap_mb: int) -> dict:
    from sessionsearch.queue import Pipeline

    settings = Settings(data_dir=str(data), redis_url=redis_url, reader_quiet_mmap_mb=quiet_mmap_mb)
    pipeline = Pipeline(settings)
    latencies: list[float] = []
    async with Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue) as engine:
        await engine.search(SearchParams(query=words[0]))
        stop_at = time.monotonic() + seconds

        async def client(n: int) -> None:
            i = n
            while time.monotonic() < stop_at:
                t = time.perf_counter()
                await engine.search(SearchParams(query=words[i % len(words)]))
                latencies.append(time.perf_counter() - t)
                i += 1

        started = time.monotonic()
        await asyncio.gather(*(client(n) for n in range(clients)))
        elapsed = time.monotonic() - started
    pipeline.close()
    return {"requests_per_s": len(latencies) / elapsed, "p50_ms": pct(latencies, 0.5) * 1000,
            "p95_ms": pct(latencies, 0.95) * 1000, "p99_ms": pct(latencies, 0.99) * 1000, "requests": len(latencies)}


def serve(data: Path, port: int, log: Path, quiet_mmap_mb: int) -> subprocess.Popen:
    env = {**os.environ, "SESSIONSEARCH_DATA_DIR": str(data), "SESSIONSEARCH_PORT": str(port),
           "SESSIONSEARCH_REDIS_URL": REDIS_URL, "SESSIONSEARCH_LOG_LEVEL": "WARNING",
           "SESSIONSEARCH_READER_QUIET_MMAP_MB": str(quiet_mmap_mb)}
    proc = subprocess.Popen([sys.executable, "-m", "sessionsearch.cli", "serve"], env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(log.read_text())


async def make_busy(data: Path, work: Path, messages: int, tag: str) -> subprocess.Popen:
    """Import `messages` more (unindexed) under new keys and start a worker that reconciles them."""
    root = work / "busy-state"
    shutil.rmtree(root, ignore_errors=True)
    write_state_dir(CorpusSpec(messages=messages, sessions=max(1, messages // 100), seed=99), root)
    for path in (root / "agents" / "main" / "sessions").glob("*.jsonl"):
        path.rename(path.with_name(f"{tag}-" + path.name))
    index = root / "agents" / "main" / "sessions" / "sessions.json"
    entries = json.loads(index.read_text())
    index.write_text(json.dumps({k.replace(":bench:", f":{tag}:"): {**v, "sessionId": f"{tag}-" + v["sessionId"]}
                                 for k, v in entries.items()}))
    async with Engine(data, settings=Settings(data_dir=str(data))) as engine:
        await run_import(engine, root)
    env = {**os.environ, "SESSIONSEARCH_DATA_DIR": str(data), "SESSIONSEARCH_REDIS_URL": REDIS_URL,
           "SESSIONSEARCH_LOG_LEVEL": "WARNING", "SESSIONSEARCH_RECONCILE_BATCH_ROWS": "2000"}
    return subprocess.Popen([sys.executable, "-m", "sessionsearch.cli", "worker", "--metrics-port", "0",
                             "--metrics-dir", str(work / "busy.metrics")], env=env,
                            stdout=open(work / "busy-worker.log", "w"), stderr=subprocess.STDOUT)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--source", default=str(HERE / "work" / "search-1000000"))
    parser.add_argument("--busy-messages", type=int, default=800_000)
    parser.add_argument("--low-clients", type=int, default=8)
    parser.add_argument("--phases", default="idle,idle_low,busy", help="which of idle, idle_low, busy to run")
    parser.add_argument("--quiet-mmap-mb", type=int, default=Settings().reader_quiet_mmap_mb,
                        help="search.readerQuietMmapMb for the server and the Python API (0: readers never map)")
    parser.add_argument("--out", default=str(HERE / "results" / "http.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install wrk")
    source = Path(args.source)
    words = json.loads((HERE / "results" / "search.json").read_text())["queries"]["mid_0.3pct"]["words"]
    work = HERE / "work" / "http"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = work / "data"
    shutil.copytree(source / "data", data)
    redis.Redis.from_url(REDIS_URL).flushdb()
    port = 8799
    report: dict = {"clients": args.clients, "seconds": args.seconds, "words": words,
                    "reader_quiet_mmap_mb": args.quiet_mmap_mb}
    chosen = args.phases.split(",")
    phases = [(name, clients, busy) for key, name, clients, busy in (
        ("idle", "idle", args.clients, False), ("idle_low", f"idle_{args.low_clients}_clients", args.low_clients, False),
        ("busy", "busy", args.clients, True)) if key in chosen]
    for phase, clients, busy in phases:
        # busy: a worker reconciles freshly imported sessions during each of the two measurements
        worker = await make_busy(data, work, args.busy_messages, f"{phase}-http") if busy else None
        server = serve(data, port, work / f"server-{phase}.log", args.quiet_mmap_mb)
        try:
            http = wrk(f"http://127.0.0.1:{port}", words, args.seconds, clients, work)
        finally:
            stop(server)
        if worker is not None:
            stop(worker)
            worker = await make_busy(data, work, args.busy_messages, f"{phase}-api")
        api = await python_api(data, words, args.seconds, clients, REDIS_URL, args.quiet_mmap_mb)
        if worker is not None:
            stop(worker)
        report[phase] = {"clients": clients, "http": http, "python_api": api,
                         "overhead_ratio_p50": http["p50_ms"] / api["p50_ms"]}
        print(f"{phase}: HTTP {http['requests_per_s']:.0f} req/s p50 {http['p50_ms']:.1f} ms p99 {http['p99_ms']:.1f} ms "
              f"(errors {http['errors']}) | Python API {api['requests_per_s']:.0f} req/s p50 {api['p50_ms']:.1f} ms "
              f"p99 {api['p99_ms']:.1f} ms | overhead x{report[phase]['overhead_ratio_p50']:.2f}", file=sys.stderr)
    Path(args.out).write_text(json.dumps(report, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    print(f"figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
