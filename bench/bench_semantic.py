"""The meaning index at scale: one agent of N messages (default 1,000,000), on SQLite and PostgreSQL.

    nice -n 10 .venv/bin/python bench/bench_semantic.py [--messages 1000000] [--stores sqlite,postgres]

Per store: builds the corpus (bench/corpus.py, appends of 100), embeds every message with the
builtin model through the embed job (Engine.embed_pending: the worker's path), then measures, query
by query and side by side, keyword search with the meaning index empty and full, and semantic and
hybrid search (p50/p95; the first semantic search, which loads the vectors, reported apart).
Nearest-neighbour recall at k = 25 of the stored int8 vectors against exact float32 search over
the same texts (embedded again here, scored chunk by chunk); memory of the in-memory vectors and
disk of the stored ones per million messages. Figures go to bench/results/semantic.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from sessionsearch.protocol import AppendParams, SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import CorpusSpec, generate  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.embed.builtin import BuiltinEmbedder  # noqa: E402

HERE = Path(__file__).resolve().parent
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_DB = "sessionsearch_bench_semantic"
K = 25


def events_for(session: int, texts: list[tuple[str, str]], start: int) -> list[dict]:
    out, parent = [], (f"s{session}-{start - 1}" if start else None)
    for i, (role, text) in enumerate(texts, start):
        mid = f"s{session}-{i}"
        out.append({"type": "message", "id": mid, "parentId": parent,
                    "message": {"role": role, "content": text, "timestamp": 1_700_000_000_000 + session * 10_000 + i}})
        parent = mid
    return out


def queries(spec: CorpusSpec) -> list[str]:
    """Corpus words (keyword hits exist) and phrases (the semantic side), deterministic."""
    texts = []
    for _, session in generate(CorpusSpec(messages=2000, sessions=20, seed=spec.seed)):
        texts += [t for _, t in session]
    picks = [" ".join(t.split()[:2]) for t in texts[1:400:40]]
    return picks + ["what did we decide about the loan", "meeting tomorrow morning", "the server is down again",
                    "travel plans for the summer", "café menu", "invoice payment overdue", "東京 会議",
                    "restart the database", "kelmorshu tavi", "ox pra qui"]


def settings_for(kind: str, data_dir: Path) -> Settings:
    url = f"postgresql://postgres@127.0.0.1:5432/{PG_DB}" if kind == "postgres" else None
    return Settings(data_dir=str(data_dir), database_url=url, semantic_min_score=-1.0)


def fresh_pg() -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB}")
        conn.execute(f"CREATE DATABASE {PG_DB}")


async def build(kind: str, spec: CorpusSpec, work: Path) -> dict[str, Any]:
    """The corpus written through Engine.append; a finished build of the same size is reused."""
    done = work / "build.json"
    if done.exists():
        return json.loads(done.read_text())
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if kind == "postgres":
        fresh_pg()
    n, t0 = 0, time.perf_counter()
    async with Engine(work, settings=settings_for(kind, work)) as engine:
        for session, texts in generate(spec):
            for start in range(0, len(texts), 100):
                chunk = texts[start:start + 100]
                await engine.append(AppendParams(sessionKey=f"agent:main:bench:{session}", events=events_for(session, chunk, start), sessionId=f"w{session}"))
                n += len(chunk)
            if session % 2000 == 0:
                print(f"  {kind}: built {n:,} messages", file=sys.stderr)
    figures = {"messages": n, "append_batch100_msgs_per_s": round(n / (time.perf_counter() - t0))}
    done.write_text(json.dumps(figures))
    return figures


async def timed(engine: Engine, body: dict) -> tuple[float, dict]:
    t = time.perf_counter()
    out = await engine.search(SearchParams.of(body))
    return (time.perf_counter() - t) * 1000, out


async def keyword_times(engine: Engine, qs: list[str], reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        for q in qs:
            times.append((await timed(engine, {"query": q}))[0])
    return times


def disk_bytes(kind: str, work: Path) -> int:
    if kind == "postgres":
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{PG_DB}") as conn:
            return int(conn.execute("SELECT pg_total_relation_size('ss_embeddings')").fetchone()[0])
    import sqlite3

    with sqlite3.connect(work / "agents" / "main.db") as conn:
        try:
            return int(conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name IN "
                                    "('embeddings', 'embeddings_by_eseq')").fetchone()[0])
        except sqlite3.Error:
            return -1


async def run_store(kind: str, spec: CorpusSpec, qs: list[str], reps: int) -> dict[str, Any]:
    work = HERE / "work" / f"semantic-{spec.messages}-{kind}"
    out: dict[str, Any] = {"build": await build(kind, spec, work)}
    async with Engine(work, settings=settings_for(kind, work)) as engine:
        before = await keyword_times(engine, qs, reps)  # meaning index empty
        t = time.perf_counter()
        outcomes = await engine.embed_pending()
        seconds = time.perf_counter() - t
        status = (await engine.index_status())["agents"][0]
        out["embed"] = {"seconds": round(seconds, 1), "msgs_per_s": round(status["embeddedMessages"] / seconds),
                        "windows": outcomes, "embedded": status["embeddedMessages"],
                        "backlog": status["embeddingBacklog"]}
        print(f"  {kind}: embedded {status['embeddedMessages']:,} in {seconds:.0f} s", file=sys.stderr)
    async with Engine(work, settings=settings_for(kind, work)) as engine:
        load_ms, _ = await timed(engine, {"query": qs[0], "mode": "semantic"})
        vectors = next(v for _, v, _ in engine._vectors._by_store.values() if v is not None)
        after: list[float] = []
        sem: list[float] = []
        hyb: list[float] = []
        found: dict[str, list[str]] = {}
        for _ in range(reps):  # interleaved: each query's three modes one after another
            for q in qs:
                after.append((await timed(engine, {"query": q}))[0])
                ms, res = await timed(engine, {"query": q, "mode": "semantic", "limit": K})
                sem.append(ms)
                found[q] = [h["messageId"] for h in res["results"]]
                hyb.append((await timed(engine, {"query": q, "mode": "hybrid"}))[0])
        scoped_ms = []
        for q in qs:  # one session's scope: the mask path
            scoped_ms.append((await timed(engine, {"query": q, "mode": "semantic",
                                                   "sessionKeys": ["agent:main:bench:7"]}))[0])
        mem = sum(getattr(vectors, name).nbytes for name in ("rid", "wid", "ts", "scale", "alive", "vec"))
        rows = vectors.n
    per_million = 1_000_000 / max(1, rows)
    out["search_ms"] = {
        "keyword_index_empty": {"p50": pct(before, 0.5), "p95": pct(before, 0.95)},
        "keyword_index_full": {"p50": pct(after, 0.5), "p95": pct(after, 0.95)},
        "keyword_ratio_p50": round(pct(after, 0.5) / pct(before, 0.5), 3),
        "semantic": {"p50": pct(sem, 0.5), "p95": pct(sem, 0.95)},
        "hybrid": {"p50": pct(hyb, 0.5), "p95": pct(hyb, 0.95)},
        "semantic_one_session": {"p50": pct(scoped_ms, 0.5), "p95": pct(scoped_ms, 0.95)},
        "first_semantic_search_loading_vectors": round(load_ms, 1),
    }
    out["memory_bytes_per_million"] = round(mem * per_million)
    out["disk_bytes_per_million"] = round(disk_bytes(kind, work) * per_million)
    out["found"] = found
    return out


async def exact_top(spec: CorpusSpec, qs: list[str]) -> tuple[dict[str, list[str]], dict[str, dict[str, float]]]:
    """Exact float32 top K per query over every message, embedded again here chunk by chunk, and
    the found messages' exact similarities (for recall that counts ties)."""
    embedder = BuiltinEmbedder.load()
    qv = embedder.embed_now(qs)
    best: dict[int, list[tuple[float, str]]] = {i: [] for i in range(len(qs))}
    ids: list[str] = []
    texts: list[str] = []

    kept: dict[str, dict[str, float]] = {q: {} for q in qs}

    def flush() -> None:
        if not texts:
            return
        sims = embedder.embed_now(texts) @ qv.T
        for j, mid in enumerate(ids):
            for i, q in enumerate(qs):
                if mid in FOUND.get(q, ()):
                    kept[q][mid] = float(sims[j, i])
        for i in range(len(qs)):
            col = sims[:, i]
            top = np.argpartition(-col, min(K, len(col) - 1))[:K]
            best[i] = sorted(best[i] + [(float(col[j]), ids[j]) for j in top], reverse=True)[:K]
        ids.clear()
        texts.clear()

    for session, msgs in generate(spec):
        for i, (_, text) in enumerate(msgs):
            ids.append(f"s{session}-{i}")
            texts.append(text)
        if len(texts) >= 50_000:
            flush()
    flush()
    for i, q in enumerate(qs):
        kept[q]["__kth__"] = best[i][-1][0]
    return {q: [mid for _, mid in best[i]] for i, q in enumerate(qs)}, kept


FOUND: dict[str, set[str]] = {}  # the semantic hits per query, whose exact similarity exact_top keeps


def recall(found: dict[str, list[str]], exact: dict[str, list[str]]) -> float:
    return round(float(np.mean([len(set(found[q]) & set(exact[q])) / K for q in exact])), 4)


def recall_ties(found: dict[str, list[str]], scores: dict[str, dict[str, float]]) -> float:
    """Recall counting a hit right when its exact similarity reaches the exact K-th one (duplicate
    texts tie, and which of them make the K is arbitrary)."""
    return round(float(np.mean([sum(scores[q].get(m, -2.0) >= scores[q]["__kth__"] - 1e-6 for m in found[q]) / K
                                for q in found])), 4)


async def recall_only(kind: str, n: int) -> None:
    """Recall of an embedded store built by an earlier run, merged into the results file."""
    spec = CorpusSpec(messages=n, sessions=max(10, n // 100))
    qs = queries(spec)
    work = HERE / "work" / f"semantic-{n}-{kind}"
    async with Engine(work, settings=settings_for(kind, work)) as engine:
        found = {q: [h["messageId"] for h in (await engine.search(SearchParams(query=q, mode="semantic", limit=K)))["results"]]
                 for q in qs}
        sem: list[float] = []
        hyb: list[float] = []
        one: list[float] = []
        for _ in range(5):  # the search figures again, of this code (the keyword ones stay the run's)
            for q in qs:
                sem.append((await timed(engine, {"query": q, "mode": "semantic", "limit": K}))[0])
                hyb.append((await timed(engine, {"query": q, "mode": "hybrid"}))[0])
                one.append((await timed(engine, {"query": q, "mode": "semantic",
                                                 "sessionKeys": ["agent:main:bench:7"]}))[0])
    FOUND.update({q: set(v) for q, v in found.items()})
    exact, scores = await exact_top(spec, qs)
    path = HERE / "results" / "semantic.json"
    result = json.loads(path.read_text())
    result["stores"][kind]["recall_at_25_vs_exact_float"] = recall(found, exact)
    result["stores"][kind]["recall_at_25_ties_counted"] = recall_ties(found, scores)
    result["stores"][kind]["search_ms"].update({
        "semantic": {"p50": pct(sem, 0.5), "p95": pct(sem, 0.95)},
        "hybrid": {"p50": pct(hyb, 0.5), "p95": pct(hyb, 0.95)},
        "semantic_one_session": {"p50": pct(one, 0.5), "p95": pct(one, 0.95)},
        "semantic_hybrid_remeasured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["stores"][kind], indent=1))


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--stores", default="sqlite,postgres")
    ap.add_argument("--pg-messages", type=int, default=None, help="PostgreSQL's corpus size (default: --messages)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--recall-only", action="store_true", help="only recall, of stores an earlier run embedded")
    args = ap.parse_args()
    sslogging.configure("WARNING")
    if args.recall_only:
        for kind in args.stores.split(","):
            await recall_only(kind, args.pg_messages if kind == "postgres" and args.pg_messages else args.messages)
        return
    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "note": "2 cores shared with other work; the run at nice 10"},
        "k": K,
        "stores": {},
    }
    for kind in args.stores.split(","):
        n = args.pg_messages if kind == "postgres" and args.pg_messages else args.messages
        spec = CorpusSpec(messages=n, sessions=max(10, n // 100))
        qs = queries(spec)
        figures = await run_store(kind, spec, qs, args.reps)
        found = figures.pop("found")
        FOUND.update({q: set(v) for q, v in found.items()})
        exact, scores = await exact_top(spec, qs)
        figures["recall_at_25_vs_exact_float"] = recall(found, exact)
        figures["recall_at_25_ties_counted"] = recall_ties(found, scores)
        figures["corpus"] = {"messages": n, "sessions": spec.sessions, "queries": len(qs)}
        result["stores"][kind] = figures
        print(json.dumps(figures, indent=1))
        (HERE / "results").mkdir(exist_ok=True)
        (HERE / "results" / "semantic.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
