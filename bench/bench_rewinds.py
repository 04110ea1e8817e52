"""Rewinds beside appends under load, in the scale-out shape, on both stores.

    SESSIONSEARCH_TEST_REDIS_PORT=6387 .venv/bin/python bench/bench_rewinds.py [--stores pg,sqlite] \
        [--seconds 180] [--clients 8] [--rate 3] [--batch 3]

The run issue 40 describes (2 web processes and 2 workers on PostgreSQL, 14 clients, ~300 messages
a second appended, 10% of the writes rewinds), scaled down for a shared 2-core machine: `--clients`
clients, each with `--sessions` sessions of its own spread over two agents, each aiming at `--rate`
writes a second (a write: an append of `--batch` messages continuing the session's active branch,
or, one write in ten, a rewind: a leaf control whose target is 1-20 messages back on that branch;
the next append continues from the target). Requests alternate between the two web processes, as a
load balancer would. The sessions grow through the run (the tables with them), so a cost that grows
with the window shows as a trend across the 20 s windows. The workers reconcile what the rewinds
leave (their sweep every 5 s; no searches, which would queue the windows sooner).

On PostgreSQL a sampler reads pg_stat_activity every 0.25 s: what each active backend of the
database waits on (wait event and the statement's first words) and, for a backend waiting on a
lock, the statement of the backend blocking it. After the run, the rewind's statements are
EXPLAIN ANALYZEd on the largest window (in a transaction rolled back).

The SQLite shape is the service one: the same 2 web processes and 2 workers on one data dir.
Per store and 20 s window: p50/p95 (ms) of appends and rewinds, the requests, the mean session size;
saved to bench/results/rewinds.json.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import commit, pct  # noqa: E402

from tests.postgres import create_pg_database, drop_pg_database  # noqa: E402
from tests.services import free_port  # noqa: E402

HERE = Path(__file__).resolve().parent
WINDOW_S = 20
AGENTS = ("main", "ops")
BASE_TS = 1767323045000


def _env(work: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    env.update(SESSIONSEARCH_DATA_DIR=str(work / "data"), SESSIONSEARCH_LOG_LEVEL="WARNING", **extra)
    return env


class Shape:
    """Two `serve` processes and two `worker` processes (1 process, 2 threads each) on one store."""

    def __init__(self, work: Path, extra: dict[str, str]) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.ports = [free_port(), free_port()]
        self.procs: list[subprocess.Popen[bytes]] = []
        for n, port in enumerate(self.ports):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "sessionsearch.cli", "serve"],
                env=_env(work, {**extra, "SESSIONSEARCH_PORT": str(port)}),
                stdout=open(work / f"web{n}.log", "w"), stderr=subprocess.STDOUT))
        for n in range(2):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "sessionsearch.cli", "worker", "--processes", "1", "--threads", "2",
                 "--metrics-port", "0", "--metrics-dir", str(work / f"worker{n}.metrics")],
                env=_env(work, {**extra, "SESSIONSEARCH_RECONCILE_SWEEP_EVERY_S": "5"}),
                stdout=open(work / f"worker{n}.log", "w"), stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 90
        for port in self.ports:
            while True:
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                    conn.request("GET", "/healthz")
                    if conn.getresponse().status == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    sys.exit(f"web process on {port} did not start: {(work / 'web0.log').read_text()[-2000:]}")
                time.sleep(0.2)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()


class Client(threading.Thread):
    """Sessions of its own, written at a pace; every request's (start, kind, seconds, session size)."""

    def __init__(self, n: int, ports: list[int], args: argparse.Namespace, stop_at: float, t0: float) -> None:
        super().__init__(daemon=True)
        self.n = n
        self.conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=120) for p in ports]
        self.args = args
        self.stop_at = stop_at
        self.t0 = t0
        self.rng = random.Random(n)
        self.sessions = [(f"agent:{AGENTS[(n + s) % len(AGENTS)]}:c{n}s{s}", []) for s in range(args.sessions)]
        self.rows = [0] * args.sessions  # rows written to each session, rewound ones included
        self.samples: list[tuple[float, str, float, int]] = []
        self.errors: list[str] = []
        self.ids = 0

    def post(self, method: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        conn = self.conns[self.ids % len(self.conns)]
        data = json.dumps(body)
        for attempt in range(2):
            try:
                conn.request("POST", f"/v1/{method}", data, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                return resp.status, json.loads(resp.read() or b"{}")
            except (OSError, http.client.HTTPException):
                conn.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def run(self) -> None:
        period = 1.0 / self.args.rate
        next_at = time.monotonic()
        while time.monotonic() < self.stop_at:
            s = self.rng.randrange(len(self.sessions))
            key, branch = self.sessions[s]
            self.ids += 1
            if len(branch) > 2 and self.rng.random() < self.args.rewind_share:
                back = self.rng.randint(1, min(20, len(branch) - 1))
                target = branch[-1 - back]
                events = [{"type": "leaf", "id": f"c{self.n}l{self.ids}", "parentId": branch[-1], "targetId": target}]
                kind = "rewind"
                del branch[len(branch) - back:]
            else:
                events = []
                for _ in range(self.args.batch):
                    self.ids += 1
                    mid = f"c{self.n}m{self.ids}"
                    role = "user" if len(branch) % 2 == 0 else "assistant"
                    events.append({"type": "message", "id": mid, "parentId": branch[-1] if branch else None,
                                   "timestamp": BASE_TS + self.ids,
                                   "message": {"role": role, "content": f"client {self.n} line {self.ids} word"
                                               f"{self.ids % 97} topic{self.rng.randrange(500)} common text here"}})
                    branch.append(mid)
                kind = "append"
            started = time.monotonic()
            try:
                status, body = self.post("transcript.append", {"sessionKey": key, "events": events})
            except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                self.errors.append(f"{kind}: {exc}")
                continue
            took = time.monotonic() - started
            if status != 200:
                self.errors.append(f"{kind}: {status} {str(body)[:200]}")
                continue
            self.rows[s] += len(events)
            self.samples.append((started - self.t0, kind, took, self.rows[s]))
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - period)  # no burst to catch up after a slow request


class Sampler(threading.Thread):
    """What the database's active backends wait on, every 0.25 s (PostgreSQL)."""

    SQL = ("SELECT a.pid, coalesce(a.wait_event_type || ':' || a.wait_event, 'cpu'), left(regexp_replace(a.query, "
           "'\\s+', ' ', 'g'), 70), (SELECT left(regexp_replace(b.query, '\\s+', ' ', 'g'), 70) FROM pg_stat_activity b "
           "WHERE b.pid = (pg_blocking_pids(a.pid))[1]) FROM pg_stat_activity a WHERE a.datname = current_database() "
           "AND a.pid <> pg_backend_pid() AND a.state = 'active'")

    def __init__(self, url: str, stop_at: float) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop_at = stop_at
        self.waits: collections.Counter[str] = collections.Counter()
        self.blocked: collections.Counter[str] = collections.Counter()
        self.samples = 0

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while time.monotonic() < self.stop_at:
                self.samples += 1
                for _pid, wait, query, blocker in conn.execute(self.SQL).fetchall():
                    self.waits[f"{wait} | {query}"] += 1
                    if blocker is not None:
                        self.blocked[f"{query}  <-  {blocker}"] += 1
                time.sleep(0.25)


def explain_rewind(url: str) -> dict[str, Any]:
    """On the largest window after the run, each rolled back: EXPLAIN ANALYZE of the statements
    that re-derived the branch from the whole window before issue 40 (a rewind's cost then), and
    the time of the store's own _reproject for a rewind of 5 messages (store/branch.py)."""
    from sessionsearch.store.postgres.writer import INDEXABLE, Writes
    from sessionsearch.store.rowids import id_sql, seq_of, window_ranges
    out: dict[str, Any] = {}
    with psycopg.connect(url) as conn:
        wid, ano, last_seq, leaf = conn.execute("SELECT wid, ano, last_seq, leaf_seq FROM ss_windows "
                                                "ORDER BY last_seq DESC LIMIT 1").fetchone()
        out["window_rows"] = last_seq
        (lo, hi), _ = window_ranges(wid)
        (back5,) = conn.execute("SELECT id FROM ss_events WHERE id BETWEEN %s AND %s AND on_branch = 1 "
                                "ORDER BY id DESC OFFSET 5 LIMIT 1", (lo, hi)).fetchone()
    out["moved_5_back_ms"] = asyncio.run(_timed_reproject(url, Writes("bench", ano), wid, seq_of(back5)))
    with psycopg.connect(url) as conn:
        first = id_sql("%(wid)s::bigint", "up.s")
        statements = {
            "whole_clear_branch": ("UPDATE ss_events SET on_branch = 0 WHERE id BETWEEN %(lo)s AND %(hi)s "
                                   "AND on_branch = 1", {"lo": lo, "hi": hi}),
            "whole_walk_and_set": (
                "WITH RECURSIVE up(s) AS (SELECT %(leaf)s::integer UNION ALL "
                f"  SELECT e.parent_seq FROM up JOIN ss_events e ON e.id BETWEEN {first} AND {first} + 1 "
                "  WHERE e.parent_seq IS NOT NULL) "
                "UPDATE ss_events SET on_branch = 1 WHERE id IN "
                f"  (SELECT {id_sql('%(wid)s::bigint', 's')} + b FROM up, (VALUES (0), (1)) AS v(b))",
                {"leaf": leaf, "wid": wid}),
            "whole_count_messages": (f"SELECT count(*) FROM ss_events WHERE id BETWEEN %(lo)s AND %(hi)s "
                                     f"AND {INDEXABLE}", {"lo": lo, "hi": hi}),
        }
        for name, (sql, params) in statements.items():
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).fetchone()[0][0]
            out[name] = {"ms": round(plan["Execution Time"], 2), "shared_hit": plan["Plan"].get("Shared Hit Blocks")}
        conn.rollback()
    return out


async def _timed_reproject(url: str, writes: Any, wid: int, leaf_seq: int) -> float:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        started = time.perf_counter()
        await writes._reproject(conn, wid, leaf_seq)
        took = time.perf_counter() - started
        await conn.rollback()
    return round(took * 1000, 2)


def summarize(samples: list[tuple[float, str, float, int]], seconds: float) -> list[dict[str, Any]]:
    rows = []
    for start in range(0, int(seconds), WINDOW_S):
        row: dict[str, Any] = {"from_s": start}
        inside = [s for s in samples if start <= s[0] < start + WINDOW_S]
        for kind in ("append", "rewind"):
            took = [s[2] for s in inside if s[1] == kind]
            row[kind] = {"n": len(took), "p50_ms": round(statistics.median(took) * 1000, 1) if took else None,
                         "p95_ms": round(pct(took, 0.95) * 1000, 1) if took else None,
                         "max_ms": round(max(took) * 1000, 1) if took else None}
        row["mean_session_rows"] = round(statistics.mean(s[3] for s in inside)) if inside else None
        a, r = row["append"]["p95_ms"], row["rewind"]["p95_ms"]
        row["rewind_over_append_p95"] = round(r / a, 2) if a and r else None
        rows.append(row)
    return rows


def run_store(store: str, args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    work = HERE / "work" / f"rewinds-{store}-{int(time.time())}"
    url = create_pg_database("ss_bench_rewinds") if store == "pg" else None
    extra = {"SESSIONSEARCH_REDIS_URL": redis_url}
    if url:
        extra["SESSIONSEARCH_DATABASE_URL"] = url
    import redis
    redis.Redis.from_url(redis_url).flushdb()
    shape = Shape(work, extra)
    try:
        load0 = os.getloadavg()[0]
        t0 = time.monotonic()
        stop_at = t0 + args.seconds
        clients = [Client(n, shape.ports, args, stop_at, t0) for n in range(args.clients)]
        sampler = Sampler(url, stop_at) if url else None
        for c in [*clients, *([sampler] if sampler else [])]:
            c.start()
        for c in clients:
            c.join()
        if sampler:
            sampler.join()
        samples = [s for c in clients for s in c.samples]
        out: dict[str, Any] = {
            "store": store, "loadavg_1m_start": load0, "loadavg_1m_end": os.getloadavg()[0],
            "messages_per_s": round(sum(args.batch for s in samples if s[1] == "append") / args.seconds, 1),
            "writes": len(samples), "errors": [e for c in clients for e in c.errors][:20],
            "windows": summarize(samples, args.seconds)}
        all_a = [s[2] for s in samples if s[1] == "append"]
        all_r = [s[2] for s in samples if s[1] == "rewind"]
        out["whole_run"] = {"append_p50_ms": round(statistics.median(all_a) * 1000, 1),
                            "append_p95_ms": round(pct(all_a, 0.95) * 1000, 1),
                            "rewind_p50_ms": round(statistics.median(all_r) * 1000, 1),
                            "rewind_p95_ms": round(pct(all_r, 0.95) * 1000, 1)}
        if sampler:
            total = sampler.samples
            out["pg_active_backends_per_sample"] = {k: round(v / total, 3) for k, v in sampler.waits.most_common(15)}
            out["pg_blocked_per_sample"] = {k: round(v / total, 3) for k, v in sampler.blocked.most_common(10)}
        if url:
            with psycopg.connect(url, autocommit=True) as conn:
                time.sleep(1)  # the backends' table counters reach the statistics within a second of their commits
                row = conn.execute("SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_dead_tup FROM pg_stat_user_tables "
                                   "WHERE relname = 'ss_events'").fetchone()
            out["ss_events_rows"] = dict(zip(("inserted", "updated", "hot_updated", "dead"), row))
            out["explain_rewind_largest_window"] = explain_rewind(url)
        return out
    finally:
        shape.stop()
        if url:
            drop_pg_database(url)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stores", default="pg,sqlite")
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--sessions", type=int, default=2, help="sessions per client")
    parser.add_argument("--rate", type=float, default=3.0, help="writes a second per client")
    parser.add_argument("--batch", type=int, default=3, help="messages per append")
    parser.add_argument("--rewind-share", type=float, default=0.1)
    parser.add_argument("--out", default="rewinds")
    args = parser.parse_args()
    port = os.environ.get("SESSIONSEARCH_TEST_REDIS_PORT", "6379")
    redis_url = f"redis://127.0.0.1:{port}/10"
    out: dict[str, Any] = {"commit": commit(), "cpus": os.cpu_count(), "seconds": args.seconds,
                           "clients": args.clients, "sessions_per_client": args.sessions, "rate_per_client": args.rate,
                           "batch": args.batch, "rewind_share": args.rewind_share, "stores": {}}
    path = HERE / "results" / f"{args.out}.json"
    for store in args.stores.split(","):
        result = run_store(store, args, redis_url)
        out["stores"][store] = result
        for w in result["windows"]:
            print(f"{store:6s} {w['from_s']:4d}s append p50 {w['append']['p50_ms']} p95 {w['append']['p95_ms']} "
                  f"(n {w['append']['n']}) | rewind p50 {w['rewind']['p50_ms']} p95 {w['rewind']['p95_ms']} "
                  f"max {w['rewind']['max_ms']} (n {w['rewind']['n']}) | rows {w['mean_session_rows']}",
                  file=sys.stderr)
        print(json.dumps({k: v for k, v in result.items() if k != "windows"}, indent=1), file=sys.stderr)
        path.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
