"""Background reconciliation benchmark: import, enqueue, workers, throughput, latency, memory.

    .venv/bin/python bench/bench_pipeline.py [--messages 1000000] [--sessions 10000]

Needs Redis on 127.0.0.1:6379 (uses database 10, flushed). In one run it measures: the import rate
of the gateway's JSONL state dir; the cost of the first search that finds every window to enqueue,
and of a second one (which must enqueue nothing); the time until `indexing` is false with 1 and
with 2 worker processes (at idle CPU priority, the default, and 1 at normal priority), as reconciliation throughput next to a bare FTS5 bulk insert of the same
rows (run before and after the workers, the mean taken: the machine's speed drifts), and next to
the same reconciliation run in-process, without the queue; search p95 while
reconciliation runs next to idle (the same searches beside the same appends to a live session,
nothing reconciling) and quiet (nothing written either), and the latency of those appends; and
worker peak RSS while reconciling one 200,000-message session. Figures go to bench/results/pipeline.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import redis

from sessionsearch.protocol import AppendParams, SearchParams, UpsertParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import CorpusSpec, generate  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.importer import run_import  # noqa: E402
from sessionsearch.queue import Pipeline  # noqa: E402

HERE = Path(__file__).resolve().parent
REDIS_URL = "redis://127.0.0.1:6379/10"


def write_state_dir(spec: CorpusSpec, root: Path) -> tuple[int, list[str]]:
    """The corpus as the gateway's legacy state dir; returns (rows, all texts in row order)."""
    sessions_dir = root / "agents" / "main" / "sessions"
    sessions_dir.mkdir(parents=True)
    entries, texts, rows = {}, [], 0
    for number, messages in generate(spec):
        sid = f"w{number}"
        entries[f"agent:main:bench:{number}"] = {"sessionId": sid, "updatedAt": 1_700_000_000_000 + number}
        with open(sessions_dir / f"{sid}.jsonl", "w") as fh:
            fh.write(json.dumps({"type": "session", "version": 3, "id": sid}) + "\n")
            parent = None
            for i, (role, text) in enumerate(messages):
                mid = f"{sid}-{i}"
                fh.write(json.dumps({"type": "message", "id": mid, "parentId": parent, "message": {
                    "role": role, "content": text, "timestamp": 1_700_000_000_000 + number * 10_000 + i}},
                    ensure_ascii=False) + "\n")
                parent = mid
                texts.append(text)
        rows += len(messages) + 1
    (sessions_dir / "sessions.json").write_text(json.dumps(entries))
    return rows, texts


def bare_bulk_insert(texts: list[str], path: Path, batch: int = 5000) -> float:
    """Messages per second into a plain FTS5 table, in transactions of `batch` rows."""
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(text, tokenize = 'unicode61 remove_diacritics 2')")
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO f (text) VALUES (?)", ((t,) for t in texts[start:start + batch]))
        conn.execute("COMMIT")
    rate = len(texts) / (time.perf_counter() - started)
    conn.close()
    return rate


def start_workers(data_dir: Path, processes: int, log: Path, **env: str) -> subprocess.Popen:
    environment = {**os.environ, "SESSIONSEARCH_DATA_DIR": str(data_dir), "SESSIONSEARCH_REDIS_URL": REDIS_URL,
                   "SESSIONSEARCH_LOG_LEVEL": "WARNING", **env}
    return subprocess.Popen([sys.executable, "-m", "sessionsearch.cli", "worker", "--processes", str(processes),
                             "--threads", "8", "--metrics-port", "0", "--metrics-dir", str(log.with_suffix(".metrics"))],
                            env=environment, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def live_message(n: int) -> dict:
    return {"type": "message", "id": f"live{n}", "parentId": f"live{n - 1}" if n > 1 else None,
            "timestamp": "2026-11-30T10:00:00Z", "message": {"role": "user", "content": f"live message {n}"}}


async def reconcile_run(base: Path, work: Path, processes: int, words: list[str], priority: str = "idle") -> dict:
    """Copy the imported data, start workers, search until complete; latency while busy and idle."""
    data = work / f"data-{processes}-{priority}"
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(base, data)
    redis.Redis.from_url(REDIS_URL).flushdb()
    settings = Settings(data_dir=str(data), redis_url=REDIS_URL)
    pipeline = Pipeline(settings)
    out: dict = {"processes": processes, "cpu_priority": priority}
    async with Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue) as engine:
        # the session catalog is read whole when the engine opens, then only what changed: what
        # a search pays after a new session appears among 10,000 (the first search below does not)
        await engine.upsert_session(UpsertParams(sessionKey="agent:main:bench-probe", label="probe"))
        t = time.perf_counter()
        await engine.catalog_view()
        out["catalog_refresh_after_change_ms"] = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        first = await engine.search(SearchParams(query=words[0]))
        out["first_search_ms"] = (time.perf_counter() - t) * 1000
        await asyncio.sleep(0)  # the jobs go out once the search has answered
        pipeline.reconciler.join_senders(600)
        out["windows_enqueued"] = pipeline.queue_depth()["ready"]
        t = time.perf_counter()
        await engine.search(SearchParams(query=words[0]))
        out["second_search_ms"] = (time.perf_counter() - t) * 1000
        out["second_search_enqueued"] = pipeline.queue_depth()["ready"] - out["windows_enqueued"]
        assert first.get("indexing")
        workers = start_workers(data, processes, work / f"workers-{processes}-{priority}.log",
                                SESSIONSEARCH_WORKER_CPU_PRIORITY=priority)
        started = time.monotonic()
        busy: list[float] = []
        appends: list[float] = []  # a gateway streaming a live session meanwhile, a message at a time
        n = 0
        while True:
            t = time.perf_counter()
            result = await engine.search(SearchParams(query=words[n % len(words)]))
            busy.append(time.perf_counter() - t)
            n += 1
            t = time.perf_counter()
            await engine.append(AppendParams(sessionKey="agent:main:bench-live", events=[live_message(n)]))
            appends.append(time.perf_counter() - t)
            if not result.get("indexing") and all(
                    a["backlog"] == 0 for a in (await engine.index_status())["agents"]):
                break
            await asyncio.sleep(0.05)
        out["seconds_until_complete"] = time.monotonic() - started
        messages = (await engine.index_status())["agents"][0]["messages"]
        out["reconcile_msgs_per_s"] = messages / out["seconds_until_complete"]
        stop(workers)
        # idle: the same searches beside the same live appends, nothing reconciling; quiet: nothing
        # written either, where readers map the database (store/sqlite/store.py) and search faster
        idle, quiet = [], []
        for i in range(max(40, len(busy))):
            t = time.perf_counter()
            await engine.search(SearchParams(query=words[i % len(words)]))
            idle.append(time.perf_counter() - t)
            await engine.append(AppendParams(sessionKey="agent:main:bench-live", events=[live_message(n + 1 + i)]))
            await asyncio.sleep(0.05)
        for i in range(max(40, len(busy))):
            t = time.perf_counter()
            await engine.search(SearchParams(query=words[i % len(words)]))
            quiet.append(time.perf_counter() - t)
        out.update(search_busy_p95_ms=pct(busy, 0.95) * 1000, search_idle_p95_ms=pct(idle, 0.95) * 1000,
                   search_quiet_p95_ms=pct(quiet, 0.95) * 1000,
                   search_busy_p50_ms=statistics.median(busy) * 1000, search_idle_p50_ms=statistics.median(idle) * 1000,
                   search_quiet_p50_ms=statistics.median(quiet) * 1000,
                   searches_while_busy=len(busy), append_busy_p50_ms=statistics.median(appends) * 1000,
                   append_busy_p95_ms=pct(appends, 0.95) * 1000, append_busy_max_ms=max(appends) * 1000)
        out["p95_ratio_busy_vs_idle"] = out["search_busy_p95_ms"] / out["search_idle_p95_ms"]
        out["p95_ratio_busy_vs_quiet"] = out["search_busy_p95_ms"] / out["search_quiet_p95_ms"]
    pipeline.close()
    shutil.rmtree(data, ignore_errors=True)
    return out


async def in_process_run(base: Path, work: Path) -> dict:
    """`sessionsearch reconcile`'s path on a copy of the imported data: no queue, one process."""
    data = work / "data-in-process"
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(base, data)
    async with Engine(data, settings=Settings(data_dir=str(data))) as engine:
        t = time.perf_counter()
        outcomes = await engine.reconcile_pending()
        seconds = time.perf_counter() - t
        messages = (await engine.index_status())["agents"][0]["messages"]
    shutil.rmtree(data, ignore_errors=True)
    return {"seconds": seconds, "msgs_per_s": messages / seconds, "windows": outcomes}


async def big_session_rss(work: Path, messages: int) -> dict:
    spec = CorpusSpec(messages=messages, sessions=1, seed=7)
    root = work / "big-state"
    shutil.rmtree(root, ignore_errors=True)
    write_state_dir(spec, root)
    data = work / "big-data"
    shutil.rmtree(data, ignore_errors=True)
    async with Engine(data, settings=Settings(data_dir=str(data))) as engine:
        await run_import(engine, root)
    redis.Redis.from_url(REDIS_URL).flushdb()
    workers = start_workers(data, 1, work / "big-worker.log")
    peak = 0.0
    started = time.monotonic()
    async with Engine(data, settings=Settings(data_dir=str(data))) as engine:
        while True:
            for pid in descendants(workers.pid):
                peak = max(peak, peak_rss_mb(pid))
            if (await engine.index_status())["agents"][0]["backlog"] == 0:
                break
            await asyncio.sleep(0.1)
    elapsed = time.monotonic() - started
    for pid in descendants(workers.pid):
        peak = max(peak, peak_rss_mb(pid))
    stop(workers)
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    return {"messages": messages, "worker_peak_rss_mb": peak, "seconds": elapsed}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--big-session", type=int, default=200_000)
    parser.add_argument("--out", default=str(HERE / "results" / "pipeline.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    redis.Redis.from_url(REDIS_URL).ping()
    work = HERE / "work" / f"pipeline-{args.messages}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spec = CorpusSpec(messages=args.messages, sessions=args.sessions)
    print(f"writing a state dir of {args.messages:,} messages in {args.sessions:,} sessions …", file=sys.stderr)
    rows, texts = write_state_dir(spec, work / "state")
    report: dict = {"corpus": {"messages": args.messages, "sessions": args.sessions, "rows": rows}}
    base = work / "base"
    async with Engine(base, settings=Settings(data_dir=str(base))) as engine:
        imported = await run_import(engine, work / "state")
    report["import"] = {"events": imported.events, "seconds": imported.seconds,
                        "events_per_s": imported.events / imported.seconds, "problems": len(imported.problems)}
    print(f"import: {report['import']['events_per_s']:,.0f} events/s", file=sys.stderr)
    # measured before and after the reconciliation runs (the machine's speed drifts): the ratios
    # use the mean of the two
    bare_runs = [bare_bulk_insert(texts, work / "bare.db")]
    print(f"bare FTS5 bulk insert: {bare_runs[0]:,.0f} msg/s", file=sys.stderr)
    with sqlite3.connect(work / "bare.db") as conn:
        conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, f, 'row')")
        words = [t for t, _ in conn.execute(
            "SELECT term, doc FROM temp.v WHERE term GLOB '[a-z]*' ORDER BY abs(doc - ?) LIMIT 5",
            (int(args.messages * 0.003),))]
    (work / "bare.db").unlink()
    report["in_process"] = await in_process_run(base, work)
    print(json.dumps(report["in_process"]), file=sys.stderr)
    runs = []
    # the default (idle CPU priority) with one and two processes, then one at normal priority
    for processes, priority in ((1, "idle"), (2, "idle"), (1, "normal")):
        run = await reconcile_run(base, work, processes, words, priority)
        run["ratio_vs_in_process"] = run["reconcile_msgs_per_s"] / report["in_process"]["msgs_per_s"]
        runs.append(run)
        print(json.dumps(run), file=sys.stderr)
    bare_runs.append(bare_bulk_insert(texts, work / "bare.db"))
    (work / "bare.db").unlink()
    del texts
    bare = statistics.mean(bare_runs)
    print(f"bare FTS5 bulk insert again: {bare_runs[1]:,.0f} msg/s (mean {bare:,.0f})", file=sys.stderr)
    report["bare_fts5_bulk_insert_runs_msgs_per_s"] = bare_runs
    report["bare_fts5_bulk_insert_msgs_per_s"] = bare
    for run in runs:
        run["ratio_vs_bare_insert"] = run["reconcile_msgs_per_s"] / bare
        print(f"{run['processes']} worker process(es) at {run['cpu_priority']} CPU priority: "
              f"{run['reconcile_msgs_per_s']:,.0f} msg/s, {run['ratio_vs_bare_insert']:.2f}x of bare; "
              f"search p95 busy/idle {run['p95_ratio_busy_vs_idle']:.2f}x (busy/quiet "
              f"{run['p95_ratio_busy_vs_quiet']:.2f}x); appends meanwhile p50 "
              f"{run['append_busy_p50_ms']:.1f} ms, p95 {run['append_busy_p95_ms']:.1f} ms, max "
              f"{run['append_busy_max_ms']:.0f} ms", file=sys.stderr)
    report["reconcile"] = runs
    shutil.rmtree(base, ignore_errors=True)
    report["big_session"] = await big_session_rss(work, args.big_session)
    print(json.dumps(report["big_session"]), file=sys.stderr)
    report["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    Path(args.out).write_text(json.dumps(report, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    print(f"figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
