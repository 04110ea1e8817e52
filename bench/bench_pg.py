"""The PostgreSQL store next to the barest careful PostgreSQL a user would write, on the same corpus.

    .venv/bin/python bench/bench_pg.py [--messages 1000000] [--reps 20] [--redis-url redis://…/14]

The anchor (issue 12): one table with a stored generated `to_tsvector('simple', text)` column and a
GIN index, `tsv @@ q ORDER BY ts_rank(tsv, q) DESC LIMIT 26`, and `ORDER BY ts DESC LIMIT 26`
for recent-first (a b-tree on ts). Ours: `sessionsearch import` of the same corpus as a gateway
state dir, reconciled by three `sessionsearch worker` processes to `indexing: false`, searched
through the Python API (`Engine.search`). Both live in scratch databases on the server at --pg
(created here, dropped at the end unless --keep). Measured side by side in one run:

- import: the anchor's COPY plus index build next to our import plus reconciliation;
- appends in batches of 100 from 4 concurrent client processes, messages per second in all
  (the same texts into both, so both corpora stay equal);
- search p95 while the workers reconcile another agent's import, next to idle, once with the
  workers at normal CPU priority and once at idle (SCHED_IDLE, the product's default: the
  workers' own CPU gives way, the database backends serving them do not);
- search p50/p95 per query class (rare, 0.3%, 1%, 10% word, two words, 4-letter prefix, and
  recent-first for each word class), interleaved query by query, with ratios, and our median CPU
  time per search in this process (the API layer's own cost) with the load average then.

The postings of common words and prefixes (docs/postgres.md) are built as a worker's check would
build them: once the import is reconciled, and again before the searches (the appends made them
stale); the workers' own checks are off so no build runs at another moment. Figures go to
bench/results/pg.json (`--out` names another).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg

from sessionsearch.protocol import AppendParams, SearchParams, StatusParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import CorpusSpec, generate  # noqa: E402
from stats import commit, pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402

HERE = Path(__file__).resolve().parent
BASE_TS = 1_700_000_000_000
ANCHOR_SCHEMA = """
CREATE TABLE msgs (
    id bigserial PRIMARY KEY,
    session text NOT NULL,
    ts bigint NOT NULL,
    text text NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED
)"""
ANCHOR_INDEXES = ("CREATE INDEX msgs_tsv ON msgs USING gin (tsv)", "CREATE INDEX msgs_ts ON msgs (ts)")
ANCHOR_RANKED = ("SELECT id, ts_rank(tsv, q) AS r FROM msgs, {q} q WHERE tsv @@ q "
                 "ORDER BY ts_rank(tsv, q) DESC LIMIT 26")
ANCHOR_RECENT = "SELECT id, ts FROM msgs, {q} q WHERE tsv @@ q ORDER BY ts DESC LIMIT 26"
WORDS_Q = "plainto_tsquery('simple', %s)"
PREFIX_Q = "to_tsquery('simple', %s || ':*')"


def url_of(admin: str, database: str) -> str:
    return admin.rsplit("/", 1)[0] + "/" + database


def message(session: int, i: int, role: str, text: str) -> dict:
    return {"type": "message", "id": f"s{session}-{i}", "parentId": f"s{session}-{i - 1}" if i else None,
            "message": {"role": role, "content": text, "timestamp": BASE_TS + session * 10_000 + i}}


def write_state_dir(spec: CorpusSpec, state: Path, agent: str) -> tuple[Counter, int, Path]:
    """The corpus as the gateway's state dir for `agent`, plus the anchor's COPY file; returns
    (document frequency of each word, messages, path of the COPY file)."""
    sessions_dir = state / "agents" / agent / "sessions"
    sessions_dir.mkdir(parents=True)
    index, df, n = {}, Counter(), 0
    copy_path = state / f"{agent}.copy"
    with open(copy_path, "w", encoding="utf-8") as copy:
        for session, texts in generate(spec):
            sid = f"w{session}"
            key = f"agent:{agent}:bench:{session}"
            index[key] = {"sessionId": sid, "updatedAt": BASE_TS + session * 10_000}
            with open(sessions_dir / f"{sid}.jsonl", "w", encoding="utf-8") as f:
                f.write(json.dumps({"type": "session", "version": 3, "id": sid,
                                    "timestamp": "2023-11-14T22:13:20Z"}) + "\n")
                for i, (role, text) in enumerate(texts):
                    f.write(json.dumps(message(session, i, role, text), ensure_ascii=False) + "\n")
                    copy.write(f"{key}\t{BASE_TS + session * 10_000 + i}\t{text}\n")
                    df.update(set(text.split()))
                    n += 1
    (sessions_dir / "sessions.json").write_text(json.dumps(index))
    return df, n, copy_path


def pick_words(df: Counter, total: int) -> dict[str, list[str]]:
    """Five words whose document frequency is nearest each class's share (Latin words only)."""
    latin = [(w, c) for w, c in df.items() if w.isascii() and w.isalpha()]
    targets = {"rare": 12 / total, "mid_0.3pct": 0.003, "common_1pct": 0.01, "common_10pct": 0.10}
    return {name: [w for w, _ in sorted(latin, key=lambda r: abs(r[1] / total - share))[:5]]
            for name, share in targets.items()}


def build_anchor(url: str, copy_path: Path) -> dict:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(ANCHOR_SCHEMA)
        t = time.perf_counter()
        with conn.cursor().copy("COPY msgs (session, ts, text) FROM STDIN") as copy:
            with open(copy_path, "rb") as f:
                while chunk := f.read(1 << 20):
                    copy.write(chunk)
        copy_s = time.perf_counter() - t
        t = time.perf_counter()
        for sql in ANCHOR_INDEXES:
            conn.execute(sql)
        index_s = time.perf_counter() - t
        conn.execute("VACUUM ANALYZE msgs")
    return {"copy_s": copy_s, "index_s": index_s, "total_s": copy_s + index_s}


class Workers:
    """Three `sessionsearch worker` processes against the database and Redis, at `priority` (--cpu-priority)."""

    def __init__(self, url: str, redis_url: str, work: Path, count: int = 3, priority: str = "idle",
                 env_extra: dict[str, str] | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
        env.update(env_extra or {})
        env.update(SESSIONSEARCH_DATABASE_URL=url, SESSIONSEARCH_REDIS_URL=redis_url,
                   SESSIONSEARCH_DATA_DIR=str(work / "data"), SESSIONSEARCH_LOG_LEVEL="WARNING",
                   SESSIONSEARCH_RECONCILE_SWEEP_EVERY_S="2",
                   # the benchmark builds the postings itself, when a worker's check would, and times it
                   SESSIONSEARCH_POSTINGS_CHECK_EVERY_S="0", SESSIONSEARCH_OPTIMIZE_EVERY_S="0")
        self.procs = [subprocess.Popen(
            [sys.executable, "-m", "sessionsearch.cli", "worker", "--processes", "1", "--threads", "2",
             "--metrics-port", "0", "--metrics-dir", str(work / f"worker{i}.metrics"), "--cpu-priority", priority],
            env=env, stdout=open(work / f"worker{i}.log", "w"), stderr=subprocess.STDOUT) for i in range(count)]

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(120)


def import_state(state: Path, url: str, work: Path, agent: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    run = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "import", str(state), "--agent", agent,
                          "--database-url", url, "--data-dir", str(work / "data"), "--json"],
                         env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"import failed: {run.stdout[-2000:]}{run.stderr[-2000:]}")


async def wait_indexed(engine: Engine, agent: str, timeout_s: float = 7200) -> float:
    started = time.perf_counter()
    while True:
        status = await engine.index_status(StatusParams(agentId=agent))
        a = status["agents"][0]
        if a["backlog"] == 0 and a["completeness"] == 1.0:
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout_s:
            sys.exit(f"reconciliation did not finish: {a}")
        await asyncio.sleep(0.5)


def classes_for(words: dict[str, list[str]]) -> dict[str, list[tuple[dict, str, str]]]:
    """Query class -> [(our request body, anchor SQL, anchor parameter)]."""
    out: dict[str, list[tuple[dict, str, str]]] = {}
    for name in ("rare", "mid_0.3pct", "common_1pct", "common_10pct"):
        out[name] = [({"query": w}, ANCHOR_RANKED.format(q=WORDS_Q), w) for w in words[name]]
    out["two_words"] = [({"query": f"{a} {b}"}, ANCHOR_RANKED.format(q=WORDS_Q), f"{a} {b}")
                        for a, b in zip(words["common_1pct"], words["common_10pct"])]
    out["prefix_4"] = [({"query": w[:4], "match": "prefix"}, ANCHOR_RANKED.format(q=PREFIX_Q), w[:4])
                       for w in words["mid_0.3pct"]]
    for name in ("rare", "mid_0.3pct", "common_1pct", "common_10pct"):
        out[f"recent_{name}"] = [({"query": w, "order": "recent"}, ANCHOR_RECENT.format(q=WORDS_Q), w)
                                 for w in words[name]]
    return out


async def measure_searches(engine: Engine, anchor_url: str, words: dict, reps: int, agent: str,
                           results: dict, save) -> dict:
    async with await psycopg.AsyncConnection.connect(anchor_url, autocommit=True) as anchor:
        for name, items in classes_for(words).items():
            ours, bare, cpu = [], [], []
            for body, sql, param in items:  # warm both caches once
                await engine.search(SearchParams.of({**body, "agentId": agent, "limit": 25}))
                await (await anchor.execute(sql, (param,))).fetchall()
            for _ in range(reps):
                for body, sql, param in items:
                    t, c = time.perf_counter(), time.process_time()
                    await engine.search(SearchParams.of({**body, "agentId": agent, "limit": 25}))
                    ours.append(time.perf_counter() - t)
                    cpu.append(time.process_time() - c)  # this process's CPU: the API layer's own cost
                    t = time.perf_counter()
                    await (await anchor.execute(sql, (param,))).fetchall()
                    bare.append(time.perf_counter() - t)
            row = {"queries": [b["query"] for b, _, _ in items],
                   "ours_p50_ms": statistics.median(ours) * 1000, "ours_p95_ms": pct(ours, 0.95) * 1000,
                   "anchor_p50_ms": statistics.median(bare) * 1000, "anchor_p95_ms": pct(bare, 0.95) * 1000,
                   "ours_cpu_p50_ms": statistics.median(cpu) * 1000, "loadavg_1m": os.getloadavg()[0]}
            row["ratio_p50"] = row["ours_p50_ms"] / row["anchor_p50_ms"]
            row["ratio_p95"] = row["ours_p95_ms"] / row["anchor_p95_ms"]
            results[name] = row
            save()
            print(f"{name:>20}: ours p50 {row['ours_p50_ms']:8.2f} p95 {row['ours_p95_ms']:8.2f} ms "
                  f"(CPU {row['ours_cpu_p50_ms']:.2f}, load {row['loadavg_1m']:.1f}) | anchor p50 "
                  f"{row['anchor_p50_ms']:8.2f} p95 {row['anchor_p95_ms']:8.2f} ms | x{row['ratio_p50']:.2f} p50, "
                  f"x{row['ratio_p95']:.2f} p95", file=sys.stderr)
    return results


def _append_client(kind: str, url: str, client: int, batches: int, start, done) -> None:
    """One client process: `batches` batches of 100 messages, after the shared start signal."""
    texts = next(generate(CorpusSpec(messages=batches * 100, sessions=1, seed=100 + client)))[1]
    if kind == "anchor":
        with psycopg.connect(url) as conn:
            start.wait()
            for b in range(batches):
                chunk = texts[b * 100:(b + 1) * 100]
                session = 900_000 + client * 10_000 + b  # the timestamps ours gets: newest of all
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany("INSERT INTO msgs (session, ts, text) VALUES (%s, %s, %s)",
                                    [(f"append-{client}-{b}", BASE_TS + session * 10_000 + i, t)
                                     for i, (_, t) in enumerate(chunk)])
        done.put(client)
        return

    async def ours() -> None:
        sslogging.configure("WARNING")
        async with Engine(settings=Settings(database_url=url)) as engine:
            start.wait()
            for b in range(batches):
                chunk = texts[b * 100:(b + 1) * 100]
                session = 900_000 + client * 10_000 + b
                await engine.append(AppendParams(sessionKey=f"agent:main:append-{client}-{b}", events=[message(session, i, role, t) for i, (role, t) in enumerate(chunk)], sessionId=f"append-{client}-{b}"))

    asyncio.run(ours())
    done.put(client)


def append_throughput(kind: str, url: str, clients: int = 4, batches: int = 50) -> float:
    ctx = multiprocessing.get_context("spawn")
    start, done = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_append_client, args=(kind, url, c, batches, start, done)) for c in range(clients)]
    for p in procs:
        p.start()
    time.sleep(3 if kind == "ours" else 1)  # each client has connected (and, ours, opened its engine)
    t = time.perf_counter()
    start.set()
    for _ in procs:
        done.get(timeout=1800)
    seconds = time.perf_counter() - t
    for p in procs:
        p.join()
    return clients * batches * 100 / seconds


async def build_postings(engine: Engine, agent: str) -> dict:
    """What a worker's check does when a build is due (worker/optimize.py): postings_due, then
    an incremental optimize of the agent; its reason and cost."""
    t = time.perf_counter()
    why = (await engine.postings_due()).get(agent)
    if why is None:
        return {"due": None}
    done = await (await engine.store(agent)).optimize(min_docs=engine.settings.postings_min_docs, incremental=True)
    return {"due": why, "seconds": time.perf_counter() - t, "words": len(done["words"]),
            "prefixes": done["prefixes"]["count"], "rows_kept": done["prefixes"]["rows"]
            + sum(w["kept"] for w in done["words"].values())}


async def timed_searches(engine: Engine, queries: list[str], stop) -> list[float]:
    """Seconds of each search of agent main for `queries` in turn, until `stop(searches so far)`."""
    out: list[float] = []
    while not stop(len(out)):
        for w in queries:
            t = time.perf_counter()
            await engine.search(SearchParams.of({"query": w, "agentId": "main", "limit": 25}))
            out.append(time.perf_counter() - t)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=None, help="default: one per 100 messages")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a server's admin URL: the benchmark creates and drops its databases there")
    parser.add_argument("--redis-url", default=os.environ.get("SESSIONSEARCH_REDIS_URL", "redis://127.0.0.1:6379/14"))
    parser.add_argument("--append-batches", type=int, default=50, help="batches of 100 per client (4 clients)")
    parser.add_argument("--worker-cpu-priority", choices=("idle", "normal"), default="idle",
                        help="the workers' --cpu-priority for the import (default idle, the product's default)")
    parser.add_argument("--busy-priorities", default="normal,idle",
                        help="search while another agent is reconciled, once per workers' CPU priority, in this order")
    parser.add_argument("--keep", action="store_true", help="keep the databases and work dir afterwards")
    parser.add_argument("--out", default="pg", help="figures go to bench/results/<out>.json")
    parser.add_argument("--db-prefix", default="ss_bench_",
                        help="the scratch databases' names start with this (a shared server: keep runs apart)")
    args = parser.parse_args()
    sslogging.configure("WARNING")
    spec = CorpusSpec(messages=args.messages, sessions=args.sessions or max(1, args.messages // 100))
    work = HERE / "work" / f"pg-{args.messages}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    tag = secrets.token_hex(3)
    names = {"anchor": f"{args.db_prefix}anchor_{tag}", "ours": f"{args.db_prefix}ours_{tag}"}
    with psycopg.connect(args.pg, autocommit=True) as admin:
        for name in names.values():
            admin.execute(f'CREATE DATABASE "{name}"')
    anchor_url, ours_url = url_of(args.pg, names["anchor"]), url_of(args.pg, names["ours"])
    import redis
    redis.Redis.from_url(args.redis_url).flushdb()
    results = HERE / "results"
    results.mkdir(exist_ok=True)

    def save() -> None:  # after every phase: a long run stopped midway still leaves its figures
        (results / f"{args.out}.json").write_text(json.dumps(out, indent=2) + "\n")

    out: dict = {"messages": args.messages, "sessions": spec.sessions, "reps": args.reps,
                 "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "code": commit()}
    try:
        print(f"writing the corpus ({args.messages:,} messages) as a state dir ...", file=sys.stderr)
        df, total, copy_path = write_state_dir(spec, work / "state", "main")
        words = pick_words(df, total)
        out["words"] = {k: {w: df[w] for w in v} for k, v in words.items()}
        with psycopg.connect(args.pg) as admin:
            out["machine"]["postgresql"] = admin.execute("SHOW server_version").fetchone()[0]

        print("anchor: COPY and index build ...", file=sys.stderr)
        out["anchor_build"] = build_anchor(anchor_url, copy_path)
        print(f"  {out['anchor_build']}", file=sys.stderr)

        print("ours: import, then 3 workers reconcile to indexing: false ...", file=sys.stderr)
        t = time.perf_counter()
        import_state(work / "state", ours_url, work, "main")
        import_s = time.perf_counter() - t
        workers = Workers(ours_url, args.redis_url, work, priority=args.worker_cpu_priority)
        try:
            async with Engine(settings=Settings(database_url=ours_url, data_dir=str(work / "data"))) as engine:
                reconcile_s = await wait_indexed(engine, "main")
                check = await engine.search(SearchParams.of({"query": words["common_1pct"][0], "agentId": "main", "limit": 1}))
                assert not check.get("indexing"), check
                out["ours_build"] = {"import_s": import_s, "reconcile_s": reconcile_s,
                                     "total_s": import_s + reconcile_s}
                out["build_ratio"] = out["ours_build"]["total_s"] / out["anchor_build"]["total_s"]
                # as the anchor's VACUUM ANALYZE after its build (neither is in the totals): planner
                # statistics that still describe an empty table make it AND the (ano, ts) b-tree's
                # bitmap of the whole agent into every word search (~30x slower at 200,000 messages)
                t = time.perf_counter()
                with psycopg.connect(ours_url, autocommit=True) as conn:
                    conn.execute("VACUUM ANALYZE")
                out["ours_build"]["vacuum_analyze_s"] = time.perf_counter() - t
                print(f"  {out['ours_build']} -> x{out['build_ratio']:.2f} the anchor", file=sys.stderr)
                out["postings_build"] = {"after_import": await build_postings(engine, "main")}
                print(f"  postings: {out['postings_build']}", file=sys.stderr)
                save()

                print("appends: 4 client processes, batches of 100 ...", file=sys.stderr)
                rates = {kind: append_throughput(kind, url, batches=args.append_batches)
                         for kind, url in (("anchor", anchor_url), ("ours", ours_url))}
                out["append_batch100_4_clients_msgs_per_s"] = {**rates, "ratio": rates["ours"] / rates["anchor"]}
                print(f"  {out['append_batch100_4_clients_msgs_per_s']}", file=sys.stderr)
                save()

                queries = words["mid_0.3pct"] + words["common_1pct"]
                out["search_during_reconcile_by_priority"] = {}
                for n, priority in enumerate(args.busy_priorities.split(",")):
                    print(f"search while the workers ({priority} CPU priority) reconcile another agent's import ...",
                          file=sys.stderr)
                    await timed_searches(engine, queries, lambda n: n >= 2 * len(queries))  # warm, not timed
                    idle = await timed_searches(engine, queries,
                                                lambda n: n >= max(3, args.reps // 2) * len(queries))
                    other = CorpusSpec(messages=max(1000, args.messages // 5),
                                       sessions=max(1, args.messages // 500), seed=7 + n)
                    agent = f"other{n}"
                    write_state_dir(other, work / f"state-{agent}", agent)
                    workers.stop()  # imported with no worker running: the busy phase is all reconciliation
                    import_state(work / f"state-{agent}", ours_url, work, agent)
                    workers = Workers(ours_url, args.redis_url, work, priority=priority)
                    while (await engine.index_status(StatusParams(agentId=agent)))["agents"][0]["indexedWindows"] == 0:
                        await asyncio.sleep(0.1)  # the workers have started reconciling
                    watcher = asyncio.create_task(wait_indexed(engine, agent))
                    busy = await timed_searches(engine, queries, lambda n: n > 0 and watcher.done())
                    other_s = await watcher
                    phase = {
                        "worker_cpu_priority": priority, "queries": queries, "other_agent_messages": other.messages,
                        "other_reconcile_s": other_s,
                        "idle_p50_ms": statistics.median(idle) * 1000, "idle_p95_ms": pct(idle, 0.95) * 1000,
                        "busy_p50_ms": statistics.median(busy) * 1000, "busy_p95_ms": pct(busy, 0.95) * 1000,
                        "busy_searches": len(busy), "ratio_p95": pct(busy, 0.95) / pct(idle, 0.95)}
                    out["search_during_reconcile_by_priority"][priority] = phase
                    if priority == args.worker_cpu_priority:
                        out["search_during_reconcile"] = phase
                    print(f"  {phase}", file=sys.stderr)
                    save()
                workers.stop()
                workers = Workers(ours_url, args.redis_url, work, priority=args.worker_cpu_priority)

                out["postings_build"]["before_searches"] = await build_postings(engine, "main")  # after the appends
                print(f"  postings: {out['postings_build']}", file=sys.stderr)
                print("searches, side by side ...", file=sys.stderr)
                out["search"] = {}
                await measure_searches(engine, anchor_url, words, args.reps, "main", out["search"], save)
        finally:
            workers.stop()
    finally:
        if not args.keep:
            with psycopg.connect(args.pg, autocommit=True) as admin:
                for name in names.values():
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            shutil.rmtree(work, ignore_errors=True)
    save()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
