"""The meaning index's vectors in a search process (issue 39): loading them cold, and searching them warm.

    .venv/bin/python bench/bench_vectors.py [--messages 200000] [--stores sqlite,postgres] [--reps 3]

Per store, one agent of N messages (bench/corpus.py through Engine.append, reused from an earlier run
of the same size in bench/work/), every message embedded by the embed job with the builtin model
(Engine.embed_pending: the worker's path, which folds the rows into packed blocks, store/packed.py),
then, side by side in one run:
- the embed job's rate (wall and per CPU second of this process), and the builtin model's own rate
  per CPU second on the corpus's texts (what one worker core embeds);
- the fold, forced once more (its seconds; the embed job folds only when enough is new);
- a cold load of the agent's vectors, interleaved `--reps` times: row by row from the per-row table
  (what every process did before: store.embedding_changes from nothing) against the packed blocks
  and the rows since (store.load_embeddings); the two are checked equal row for row;
- the first semantic search of a fresh Engine (the embedder already loaded): as configured (a
  search waits LOAD_WAIT_S for the load, then answers `indexing: true` while it goes on), and
  waiting for the whole load;
- warm, query by query: keyword, semantic and hybrid at limit 25, p50/p95, and the hits each found.
The machine note and the load average go beside the figures: the machine is shared.
Figures go to bench/results/vectors.json; with --synthetic (the cold load and the scan of random
vectors written straight into the per-row table, for a million rows), to vectors-synthetic-<n>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_semantic  # noqa: E402
from bench_semantic import build, queries, settings_for, timed  # noqa: E402
from corpus import CorpusSpec, generate  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.embed.builtin import BuiltinEmbedder  # noqa: E402
from sessionsearch.protocol import SearchParams  # noqa: E402
from sessionsearch.search import meaning, vectors  # noqa: E402
from sessionsearch.search.vectors import AgentVectors  # noqa: E402
from sessionsearch.store import packed  # noqa: E402

HERE = Path(__file__).resolve().parent
K = 25
bench_semantic.PG_DB = "sessionsearch_bench_pgvec"  # this bench's database (dropped at the end)


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def model_rate(spec: CorpusSpec, n: int = 20_000) -> dict[str, float]:
    """The builtin model alone on the corpus's first `n` texts, batches of 512: messages a CPU
    second of this process (one core's worth) and a wall second."""
    texts: list[str] = []
    for _, session in generate(spec):
        texts += [t for _, t in session]
        if len(texts) >= n:
            break
    embedder = BuiltinEmbedder.load()
    embedder.embed_now(texts[:512])  # warm
    cpu, wall = time.process_time(), time.perf_counter()
    for at in range(0, n, 512):
        embedder.embed_now(texts[at:at + 512])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"messages": n, "per_cpu_second": round(n / cpu), "per_wall_second": round(n / wall)}


def same_rows(a: AgentVectors, b: AgentVectors) -> bool:
    def rows(v: AgentVectors) -> tuple[np.ndarray, ...]:
        live = np.flatnonzero(v.alive[:v.n])
        order = live[np.argsort(v.rid[live])]
        return v.rid[order], v.ts[order], v.scale[order], v.vec[order]
    return all(np.array_equal(x, y) for x, y in zip(rows(a), rows(b)))


async def fold_now(engine: Engine) -> dict[str, Any] | None:
    """The agent's vectors folded into blocks now, whatever the fold's thresholds say."""
    saved = packed.FOLD_MIN_ROWS, packed.FOLD_SHARE
    packed.FOLD_MIN_ROWS, packed.FOLD_SHARE = 0, 10**9
    try:
        return await (await engine.store("main")).fold_vectors()
    finally:
        packed.FOLD_MIN_ROWS, packed.FOLD_SHARE = saved


async def cold_loads(engine: Engine, reps: int) -> dict[str, Any]:
    store = await engine.store("main")
    embedder = await engine.embedder()
    assert embedder is not None
    dims = embedder.dimensions
    by_rows_ms: list[float] = []
    packed_ms: list[float] = []
    cpu: dict[str, list[float]] = {"by_rows": [], "packed": []}  # this process's CPU (a loaded machine's wall is not)
    equal = True
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        async with store.reader() as reader:
            head = await store.meaning_head(reader, embedder.model)
            assert head.model_no is not None
            changes = await store.embedding_changes(reader, head.model_no, 0, 0)
        old = AgentVectors(head.model_no, dims)
        old.apply(changes)
        by_rows_ms.append((time.perf_counter() - t) * 1000)
        cpu["by_rows"].append((time.process_time() - c) * 1000)
        del changes
        t, c = time.perf_counter(), time.process_time()
        async with store.reader() as reader:
            head = await store.meaning_head(reader, embedder.model)
            assert head.model_no is not None
            held, since = await store.load_embeddings(reader, head.model_no, dims)
        new = await asyncio.to_thread(vectors._assembled, held, since, dims)
        packed_ms.append((time.perf_counter() - t) * 1000)
        cpu["packed"].append((time.process_time() - c) * 1000)
        equal &= same_rows(old, new)
        rows, from_blocks = new.live, len(held)
        del old, new, held, since
    return {"rows_by_rows_ms": [round(x) for x in by_rows_ms], "packed_blocks_ms": [round(x) for x in packed_ms],
            "cpu_ms_of_this_process": {k: [round(x) for x in v] for k, v in cpu.items()},
            "rows": rows, "rows_from_blocks": from_blocks, "packed_equals_rows": equal}


async def first_search(kind: str, work: Path, q: str, *, wait_whole: bool) -> dict[str, Any]:
    saved = meaning.LOAD_WAIT_S
    if wait_whole:
        meaning.LOAD_WAIT_S = 600.0
    try:
        async with Engine(work, settings=settings_for(kind, work)) as engine:
            await engine.embedder()  # a process's start loads it; the figure is the vectors'
            await engine.search(SearchParams(query=q))  # the keyword path's first use, not measured
            ms, out = await timed(engine, {"query": q, "mode": "semantic", "limit": K})
            figures: dict[str, Any] = {"ms": round(ms, 1), "indexing": bool(out.get("indexing")),
                                       "hits": len(out["results"])}
            if not wait_whole:  # until the load that search began is done
                t = time.perf_counter()
                store = await engine.store("main")
                while engine._vectors.slot(store)[0] is None:
                    await asyncio.sleep(0.01)
                figures["loaded_after_ms"] = round(ms + (time.perf_counter() - t) * 1000, 1)
                ms2, out2 = await timed(engine, {"query": q, "mode": "semantic", "limit": K})
                figures["next_search_ms"] = round(ms2, 1)
                figures["next_search_hits"] = len(out2["results"])
            return figures
    finally:
        meaning.LOAD_WAIT_S = saved


async def warm(kind: str, work: Path, qs: list[str], reps: int) -> dict[str, Any]:
    async with Engine(work, settings=settings_for(kind, work)) as engine:
        await timed(engine, {"query": qs[0], "mode": "hybrid"})
        kw: list[float] = []
        sem: list[float] = []
        hyb: list[float] = []
        same: list[float] = []
        hits: dict[str, list[int]] = {"keyword": [], "semantic": [], "hybrid": [], "same": []}
        for _ in range(reps):  # interleaved: each query's modes one after another
            for q in qs:
                for mode, into in (("keyword", kw), ("semantic", sem), ("hybrid", hyb)):
                    ms, out = await timed(engine, {"query": q, "mode": mode, "limit": K})
                    into.append(ms)
                    hits[mode].append(len(out["results"]))
                # semantic at keyword's hit count (the "at the same hit count")
                ms, out = await timed(engine, {"query": q, "mode": "semantic", "limit": max(1, hits["keyword"][-1])})
                same.append(ms)
                hits["same"].append(len(out["results"]))
        held = next(e.held for e in engine._vectors._by_store.values() if e.held is not None)
        store = await engine.store("main")
        embedder = await engine.embedder()
        assert embedder is not None
        allowed = np.ones(int(held.wid[:held.n].max()) + 1, bool)
        qv = await embedder.embed_query(qs[-5])
        scan: list[float] = []
        for _ in range(10):
            t = time.perf_counter()
            held.top(qv, allowed=allowed, role=None, since=None, until=None, floor=-1.0, k=K)
            scan.append((time.perf_counter() - t) * 1000)
        del store
        return {
            "keyword": {"p50": pct(kw, 0.5), "p95": pct(kw, 0.95), "mean_hits": round(float(np.mean(hits["keyword"])), 1)},
            "semantic": {"p50": pct(sem, 0.5), "p95": pct(sem, 0.95), "mean_hits": round(float(np.mean(hits["semantic"])), 1)},
            "hybrid": {"p50": pct(hyb, 0.5), "p95": pct(hyb, 0.95), "mean_hits": round(float(np.mean(hits["hybrid"])), 1)},
            "semantic_at_keywords_hit_count": {"p50": pct(same, 0.5), "p95": pct(same, 0.95),
                                               "mean_hits": round(float(np.mean(hits["same"])), 1)},
            "semantic_p95_over_keyword_p95_same_hits": round(pct(same, 0.95) / pct(kw, 0.95), 2),
            "scan_only_ms_p50": pct(scan, 0.5),
            "memory_bytes_per_million": round(held.nbytes * 1_000_000 / max(1, held.n)),
        }


async def run_store(kind: str, n: int, reps: int) -> dict[str, Any]:
    spec = CorpusSpec(messages=n, sessions=max(10, n // 100))
    qs = queries(spec)
    work = HERE / "work" / f"vectors-{n}-{kind}"
    out: dict[str, Any] = {"build": await build(kind, spec, work), "load_avg_start": load_avg()}
    async with Engine(work, settings=settings_for(kind, work)) as engine:
        status = (await engine.index_status())["agents"][0]
        if status["embeddingBacklog"]:
            cpu, t = time.process_time(), time.perf_counter()
            await engine.embed_pending()
            seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
            status = (await engine.index_status())["agents"][0]
            out["embed_job"] = {"seconds": round(seconds, 1), "per_wall_second": round(status["embeddedMessages"] / seconds),
                                "per_cpu_second_of_this_process": round(status["embeddedMessages"] / cpu),
                                "embedded": status["embeddedMessages"], "backlog": status["embeddingBacklog"]}
            print(f"  {kind}: embedded {status['embeddedMessages']:,} in {seconds:.0f} s", file=sys.stderr)
        out["fold"] = await fold_now(engine)
        out["cold_load"] = await cold_loads(engine, reps)
    out["load_avg_cold"] = load_avg()
    out["first_semantic_search"] = await first_search(kind, work, qs[10], wait_whole=False)
    out["first_semantic_search_waiting_whole_load"] = await first_search(kind, work, qs[11], wait_whole=True)
    out["warm_ms"] = await warm(kind, work, qs, reps)
    out["load_avg_end"] = load_avg()
    return out


async def synthetic(kind: str, n: int, reps: int) -> dict[str, Any]:
    """The cold load and the scan at `n` rows of random int8 vectors written straight into the
    per-row table (100 rows a window, 10,000 windows a million): what a load and a scan cost does
    not depend on the vectors' values, and embedding a million messages through the product takes
    longer than this machine's share allows."""
    import shutil
    import sqlite3

    from sessionsearch.protocol import AppendParams

    work = HERE / "work" / f"vectors-synthetic-{n}-{kind}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if kind == "postgres":
        bench_semantic.fresh_pg()
    out: dict[str, Any] = {"rows": n, "load_avg_start": load_avg()}
    async with Engine(work, settings=settings_for(kind, work)) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:seed", events=bench_semantic.events_for(0, [("user", "seed")], 0)))
        await engine.embed_pending()
        rid = "((i / 100 + 1000) << 17) | ((i % 100) << 1)"
        t = time.perf_counter()
        if kind == "postgres":
            import psycopg

            with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{bench_semantic.PG_DB}", autocommit=True) as conn:
                conn.execute(f"INSERT INTO ss_embeddings SELECT {rid.replace('i /', 'i::bigint /').replace('%', '%%')}, a.ano, a.embed_model, "
                             "a.embed_seq + 1, i, 0.004, decode(repeat(md5(i::text), 16), 'hex') "
                             "FROM ss_agents a, generate_series(0, %s - 1) i", (n,))
                conn.execute("UPDATE ss_agents SET embed_seq = embed_seq + 1")
                conn.execute("VACUUM ANALYZE ss_embeddings")
        else:
            with sqlite3.connect(work / "agents" / "main.db") as conn:
                conn.execute(f"WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < ? - 1) "
                             f"INSERT INTO embeddings (rid, mno, eseq, ts, scale, vec) SELECT {rid}, "
                             "(SELECT value FROM meta WHERE key = 'embed_model'), "
                             "(SELECT value + 1 FROM meta WHERE key = 'embed_seq'), i, 0.004, randomblob(256) FROM s",
                             (n,))
                conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'embed_seq'")
        out["written_s"] = round(time.perf_counter() - t, 1)
        out["fold"] = await fold_now(engine)
        out["load_avg_cold"] = load_avg()
        out["cold_load"] = await cold_loads(engine, reps)
        store = await engine.store("main")
        embedder = await engine.embedder()
        assert embedder is not None
        async with store.reader() as reader:
            head = await store.meaning_head(reader, embedder.model)
            assert head.model_no is not None
            held, since = await store.load_embeddings(reader, head.model_no, embedder.dimensions)
        vecs = vectors._assembled(held, since, embedder.dimensions)
        allowed = np.ones(int(vecs.wid.max()) + 1, bool)
        some = np.zeros_like(allowed)
        some[1000:1100] = True  # 100 windows of 10,000: a scoped search
        scan: dict[str, list[float]] = {"all": [], "one_percent_of_windows": []}
        for q in queries(CorpusSpec(messages=2000, sessions=20))[:10]:
            qv = await embedder.embed_query(q)
            for name, mask in (("all", allowed), ("one_percent_of_windows", some)):
                t = time.perf_counter()
                vecs.top(qv, allowed=mask, role=None, since=None, until=None, floor=-1.0, k=K)
                scan[name].append((time.perf_counter() - t) * 1000)
        out["scan_ms"] = {name: {"p50": pct(v, 0.5), "p95": pct(v, 0.95)} for name, v in scan.items()}
        out["memory_bytes"] = vecs.nbytes
    out["load_avg_end"] = load_avg()
    shutil.rmtree(work, ignore_errors=True)
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--stores", default="sqlite,postgres")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep-db", action="store_true", help="leave the PostgreSQL database (default: drop it)")
    ap.add_argument("--synthetic", action="store_true", help="only the cold load and the scan, of random vectors")
    args = ap.parse_args()
    sslogging.configure("WARNING")
    path = HERE / "results" / (f"vectors-synthetic-{args.messages}.json" if args.synthetic else "vectors.json")
    result: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    result.update({"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                               "note": "2 cores shared by 8 busy sessions (load average beside each figure)"}})
    if args.synthetic:
        bench_semantic.PG_DB = "sessionsearch_bench_pgvec_synthetic"  # beside a corpus run's
        for kind in args.stores.split(","):
            result.setdefault("synthetic", {})[f"{kind}-{args.messages}"] = figures = await synthetic(
                kind, args.messages, args.reps)
            print(json.dumps(figures, indent=1))
            path.write_text(json.dumps(result, indent=2) + "\n")
        if "postgres" in args.stores:
            _drop_db()
        return
    result.setdefault("runs", {})
    result["builtin_model_alone"] = {**model_rate(CorpusSpec(messages=20_000, sessions=200)), "load_avg": load_avg()}
    print(json.dumps(result["builtin_model_alone"]), file=sys.stderr)
    for kind in args.stores.split(","):
        figures = await run_store(kind, args.messages, args.reps)
        result["runs"][f"{kind}-{args.messages}"] = figures
        print(json.dumps(figures, indent=1))
        path.write_text(json.dumps(result, indent=2) + "\n")
    if "postgres" in args.stores and not args.keep_db:
        _drop_db()


def _drop_db() -> None:
    import psycopg

    with psycopg.connect(bench_semantic.PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {bench_semantic.PG_DB}")


if __name__ == "__main__":
    asyncio.run(main())
