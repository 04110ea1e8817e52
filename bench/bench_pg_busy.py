"""Search while another agent is reconciled, for several `reconcile.slots` values side by side.

    .venv/bin/python bench/bench_pg_busy.py --database-url postgresql://…/ss_bench_ours_xxxx \
        --words-from bench/results/pg.json [--slots 0,1,2] [--workers 3] [--rounds 2] [--other-messages 200000]

The database is one `bench_pg.py --keep` left: agent main, reconciled, its postings built; the
words searched are that run's 0.3% and 1% words (its JSON's `words`). Each round runs every
(slots, workers) pair once, the order reversed every other round (A B C, C B A, …): searches of main with no
worker running (idle), then another agent's state dir imported with no worker running, three
`sessionsearch worker` processes (or --workers) started with SESSIONSEARCH_RECONCILE_SLOTS at the value (CPU
priority --worker-cpu-priority) and main searched until that agent is at `indexing: false`
(busy); the agent's rows are then deleted and vacuumed, so every round starts from the same
database. Per run: idle and busy p50/p95, their ratio, the reconciliation's wall time, and the
workers' and the database backends' CPU seconds over it. Figures go to bench/results/<out>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import psycopg

from sessionsearch.protocol import StatusParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pg import Workers, import_state, timed_searches, wait_indexed, write_state_dir  # noqa: E402
from corpus import CorpusSpec  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402

HERE = Path(__file__).resolve().parent
DROP_AGENT = (
    "DELETE FROM ss_index WHERE ano = %(ano)s",
    "DELETE FROM ss_events WHERE wid IN (SELECT wid FROM ss_windows WHERE ano = %(ano)s)",
    "DELETE FROM ss_windows WHERE ano = %(ano)s",
    "DELETE FROM ss_sessions WHERE ano = %(ano)s",
    "DELETE FROM ss_deleted WHERE ano = %(ano)s",
)


def backends_cpu_s(url: str) -> float:
    """CPU seconds (user + system) of every backend of the database now, read from /proc: the
    server runs on this machine."""
    with psycopg.connect(url, autocommit=True) as conn:
        pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                           "AND pid <> pg_backend_pid()").fetchall()]
    return sum(_proc_cpu_s(pid) for pid in pids)


def _proc_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s(pid: int) -> float:
    """CPU seconds of `pid` and its live descendants."""
    total = _proc_cpu_s(pid)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        total += sum(children_cpu_s(int(k)) for k in kids)
    return total


async def one_run(engine: Engine, url: str, redis_url: str, work: Path, queries: list[str], reps: int,
                  slots: int, count: int, tag: str, other: CorpusSpec, priority: str) -> dict:
    await timed_searches(engine, queries, lambda n: n >= 2 * len(queries))  # warm: plans, pool connections
    idle = await timed_searches(engine, queries, lambda n: n >= reps * len(queries))
    agent = f"busy{tag}"
    write_state_dir(other, work / f"state-{agent}", agent)
    t = time.perf_counter()
    import_state(work / f"state-{agent}", url, work, agent)
    import_s = time.perf_counter() - t
    workers = Workers(url, redis_url, work, count=count, priority=priority,
                      env_extra={"SESSIONSEARCH_RECONCILE_SLOTS": str(slots)})
    try:
        cpu0 = backends_cpu_s(url)
        while (await engine.index_status(StatusParams(agentId=agent)))["agents"][0]["indexedWindows"] == 0:
            await asyncio.sleep(0.1)
        watcher = asyncio.create_task(wait_indexed(engine, agent))
        busy = await timed_searches(engine, queries, lambda n: n > 0 and watcher.done())
        reconcile_s = await watcher
        workers_cpu = sum(children_cpu_s(p.pid) for p in workers.procs)
        backends = backends_cpu_s(url) - cpu0
    finally:
        workers.stop()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ano = (await (await conn.execute("SELECT ano FROM ss_agents WHERE agent_id = %s", (agent,))).fetchone())[0]
        for sql in DROP_AGENT:
            await conn.execute(sql, {"ano": ano})
        await conn.execute("VACUUM ss_index, ss_events, ss_windows")
    return {"slots": slots, "workers": count, "agent": agent, "import_s": import_s, "reconcile_s": reconcile_s,
            "workers_cpu_s": workers_cpu, "backends_cpu_s": backends,
            "idle_p50_ms": statistics.median(idle) * 1000, "idle_p95_ms": pct(idle, 0.95) * 1000,
            "busy_p50_ms": statistics.median(busy) * 1000, "busy_p95_ms": pct(busy, 0.95) * 1000,
            "busy_searches": len(busy), "ratio_p95": pct(busy, 0.95) / pct(idle, 0.95),
            "loadavg_1m": os.getloadavg()[0]}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True, help="a database bench_pg.py --keep left (agent main)")
    parser.add_argument("--words-from", required=True, help="that run's JSON (its `words`)")
    parser.add_argument("--slots", default="0,1,2")
    parser.add_argument("--workers", default="3", help="worker processes (2 threads each), one run per value and slots")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--other-messages", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=10, help="idle searches of each query per run")
    parser.add_argument("--worker-cpu-priority", choices=("idle", "normal"), default="idle")
    parser.add_argument("--redis-url", default=os.environ.get("SESSIONSEARCH_REDIS_URL", "redis://127.0.0.1:6379/14"))
    parser.add_argument("--out", default="pg_busy")
    args = parser.parse_args()
    sslogging.configure("WARNING")
    words = json.loads(Path(args.words_from).read_text())["words"]
    queries = list(words["mid_0.3pct"]) + list(words["common_1pct"])
    shapes = [(int(s), int(w)) for s in args.slots.split(",") for w in args.workers.split(",")]
    work = HERE / "work" / "pg-busy"
    work.mkdir(parents=True, exist_ok=True)
    import redis
    redis.Redis.from_url(args.redis_url).flushdb()
    out: dict = {"database": args.database_url.rsplit("/", 1)[1], "queries": queries, "rounds": args.rounds,
                 "other_messages": args.other_messages, "worker_cpu_priority": args.worker_cpu_priority,
                 "cpus": os.cpu_count(), "runs": []}
    path = HERE / "results" / f"{args.out}.json"
    stamp = int(time.time())
    async with Engine(settings=Settings(database_url=args.database_url, data_dir=str(work / "data"))) as engine:
        for r in range(args.rounds):
            for value, count in (shapes if r % 2 == 0 else shapes[::-1]):
                other = CorpusSpec(messages=args.other_messages, sessions=max(1, args.other_messages // 100),
                                   seed=100 + r)
                run = await one_run(engine, args.database_url, args.redis_url, work, queries, args.reps, value,
                                    count, f"{stamp}r{r}s{value}w{count}", other, args.worker_cpu_priority)
                run["round"] = r
                out["runs"].append(run)
                print(json.dumps(run), file=sys.stderr)
                path.write_text(json.dumps(out, indent=2) + "\n")
    out["by_shape"] = {}
    for value, count in shapes:
        runs = [x for x in out["runs"] if (x["slots"], x["workers"]) == (value, count)]
        out["by_shape"][f"slots={value},workers={count}"] = {k: statistics.median(x[k] for x in runs) for k in
                                       ("ratio_p95", "busy_p95_ms", "idle_p95_ms", "reconcile_s",
                                        "workers_cpu_s", "backends_cpu_s")}
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["by_shape"], indent=2))


if __name__ == "__main__":
    asyncio.run(main())
