"""How long `/healthz` and `/readyz` take while searches saturate the web processes.

    .venv/bin/python bench/bench_probes.py --label before [--store postgres|sqlite] [--clients 14]
        [--seconds 20] [--web-workers 2] [--agents 20] [--redis-url redis://127.0.0.1:6379/14]

Starts a real `sessionsearch serve --workers N` (PostgreSQL in a fresh database by default, the
scale-out shape's store; or SQLite files), stores `--agents` agents of a few hundred messages
each, then runs `--clients` client threads, each posting operator searches across every agent
back to back (in a process of their own), while a prober opens a fresh connection every 0.1 s for `/healthz` and then
`/readyz` (as a load balancer does) and times each. Prints p50/p95/max and the probes over 50 ms
and over 0.5 s; saves them under `--label` in bench/results/probes.json (other labels kept).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import commit, pct  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "probes.json"
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
WORDS = [f"w{i:03}" for i in range(300)]


def call(port: int, method: str, path: str, body: dict | None = None, timeout: float = 60) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def seed(port: int, agents: int, rng: random.Random) -> int:
    """`agents` agents with 4 sessions of 100 messages each; the messages stored."""
    stored = 0
    for a in range(agents):
        for s in range(4):
            events, parent = [], None
            for i in range(100):
                mid = f"a{a}s{s}m{i}"
                text = " ".join(rng.choice(WORDS) for _ in range(12))
                events.append({"type": "message", "id": mid, "parentId": parent,
                               "message": {"role": "user" if i % 2 == 0 else "assistant", "content": text,
                                           "timestamp": 1767323045000 + i}})
                parent = mid
            status, answer = call(port, "POST", "/v1/transcript.append",
                                  {"sessionKey": f"agent:bench{a}:s{s}", "events": events})
            assert status == 200, answer
            stored += len(events)
    return stored


def load(port: int, stop: threading.Event, done: list[int], seed_n: int) -> None:
    rng = random.Random(seed_n)
    while not stop.is_set():
        body = {"query": " ".join(rng.sample(WORDS, 2)), "limit": 25, "match": rng.choice(["exact", "prefix"])}
        try:
            status, _ = call(port, "POST", "/v1/sessions.search", body)
        except OSError:
            continue
        if status == 200:
            done.append(1)


def clients(port: int, n: int, seconds: float, searches: Any) -> None:
    """`n` client threads searching for `seconds`, in a process of their own: in the prober's, they
    would hold its GIL and the probes' times would count that wait."""
    stop = threading.Event()
    done: list[int] = []
    threads = [threading.Thread(target=load, args=(port, stop, done, i)) for i in range(n)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    searches.value = len(done)


def probe(port: int, stop: threading.Event, times: dict[str, list[float]], statuses: dict[str, list[int]]) -> None:
    while not stop.is_set():
        for path in ("/healthz", "/readyz"):
            started = time.perf_counter()
            try:
                status, _ = call(port, "GET", path, timeout=10)
            except OSError:
                status = 0
            times[path].append(time.perf_counter() - started)
            statuses[path].append(status)
        stop.wait(0.1)


def summary(seconds: list[float], statuses: list[int]) -> dict:
    ms = [s * 1000 for s in seconds]
    return {"probes": len(ms), "p50_ms": round(pct(ms, 0.5), 1), "p95_ms": round(pct(ms, 0.95), 1),
            "max_ms": round(max(ms), 1), "over_50ms": sum(m > 50 for m in ms), "over_500ms": sum(m > 500 for m in ms),
            "not_200": sum(s != 200 for s in statuses)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label", required=True, help="the key the figures are saved under (before, after)")
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--clients", type=int, default=14)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--redis-url", help="a Redis for the queue (default: reconciliation in-process)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-probes-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    url = None
    if args.store == "postgres":
        name = f"ss_bench_probes_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = PG_ADMIN_URL.rpartition("/")[0] + f"/{name}"
        env["SESSIONSEARCH_DATABASE_URL"] = url
    if args.redis_url:
        env["SESSIONSEARCH_REDIS_URL"] = args.redis_url
    port = random.randint(20000, 40000)
    env.update(SESSIONSEARCH_DATA_DIR=str(work / "data"), SESSIONSEARCH_PORT=str(port), SESSIONSEARCH_LOG_LEVEL="WARNING")
    log = open(work / "web.log", "w")
    web = subprocess.Popen([sys.executable, "-m", "sessionsearch.cli", "serve", "--workers", str(args.web_workers)],
                           env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                if call(port, "GET", "/readyz", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            assert web.poll() is None, (work / "web.log").read_text()[-2000:]
            time.sleep(0.1)
        stored = seed(port, args.agents, random.Random(1))
        searches = multiprocessing.Value("i", 0)
        load_process = multiprocessing.Process(target=clients, args=(port, args.clients, args.seconds, searches))
        load_process.start()
        stop = threading.Event()
        times: dict[str, list[float]] = {"/healthz": [], "/readyz": []}
        statuses: dict[str, list[int]] = {"/healthz": [], "/readyz": []}
        prober = threading.Thread(target=probe, args=(port, stop, times, statuses))
        prober.start()
        load_process.join()
        stop.set()
        prober.join()
    finally:
        web.terminate()
        web.wait(60)
        log.close()
        if url is not None:
            with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {url.rpartition('/')[2]} WITH (FORCE)")
    result = {"commit": commit(), "store": args.store, "webWorkers": args.web_workers, "clients": args.clients,
              "seconds": args.seconds, "agents": args.agents, "messages": stored,
              "searchesPerS": round(searches.value / args.seconds, 1),
              **{path.strip("/"): summary(times[path], statuses[path]) for path in times}}
    print(json.dumps(result, indent=2))
    saved = json.loads(OUT.read_text()) if OUT.exists() else {}
    saved[args.label] = result
    OUT.write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    main()
