"""Search by meaning: quality on a labelled set, the builtin embedder's speed on one core, and the
calibration of `search.semanticMinScore`.

    .venv/bin/python bench/bench_meaning.py [--openai-url http://127.0.0.1:11434 --openai-model nomic-embed-text \
        --openai-dimensions 768]

The set is bench/data/meaning_set.json: 74 messages across topics and languages; `paraphrase`
questions (English) and `multilingual` ones (Italian, German, Spanish, French, Japanese, Chinese,
Korean) that share no word with their target message (unicode61 tokens, CJK bigrams: checked here,
the run stops if one does); `keyword` questions (names, ids, quotes); `crosslingual` English
questions for messages in other languages; `unanswerable` questions with no answer in the set.

(a) Quality, recall@1, recall@5 and MRR per group (a target past the 25th place counts 0):
    - `semantic exact <embedder>`: exact cosine search over the messages' vectors, for each
      embedder at hand (the builtin one, its first 128 and 64 dimensions, which its training makes
      usable alone, and the openai one when an endpoint is given);
    - `keyword`: the product's own search (`Engine.search`, mode keyword) on a fresh data dir;
    - `hybrid rrf (bench)`: reciprocal rank fusion (1/(60 + rank)) of those two lists, each cut to
      25 and the semantic one to the chosen floor, as SPEC §4 defines hybrid;
    - `semantic engine` / `hybrid engine`: the product's own modes, when the engine accepts `mode`
      (else reported as not available), once the workers have embedded everything.
    For each keyword question: is keyword's top hit within hybrid's top 3.
(b) Builtin throughput in a child process pinned to one core (taskset; tokenizer threads off):
    messages a second by CPU time and by wall time, batches of 256 and 64, on 20,000 messages of
    realistic length (lengths log-normal, median ~200 characters, cut at 4,000) made of the set's
    English sentences; and one query's embedding time (p50/p95), what a semantic search adds.
(c) Calibration: cosine of each question (paraphrase, multilingual) to its target and to every
    other message, and of each unanswerable question's nearest message; the floor chosen is the
    highest on a 0.025 grid that keeps >= 95% of the targets found first and >= 90% of those found
    in the top 5 (a floor costs recall wherever keyword finds nothing, as for every paraphrase).
Figures go to bench/results/meaning.json (--out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
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

from sessionsearch.protocol import AppendParams, SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.embed import Embedder, unit_rows  # noqa: E402
from sessionsearch.embed.builtin import BuiltinEmbedder  # noqa: E402
from sessionsearch.errors import InvalidRequest  # noqa: E402
from sessionsearch.text import cjk, unicode61  # noqa: E402

HERE = Path(__file__).resolve().parent
SET = HERE / "data" / "meaning_set.json"
DEPTH = 25  # the most hits a search returns (SPEC §4)
RRF_K = 60
GROUPS = ("paraphrase", "keyword", "multilingual", "crosslingual")
GRID = [round(0.025 * i, 3) for i in range(1, 21)]


def words(text: str) -> set[str]:
    """What keyword search matches by: unicode61 tokens of the indexed form, CJK bigrams (a lone CJK
    character is a shadow unigram, which a query word of two or more never matches alone)."""
    return {w for w in unicode61.tokens(cjk.index_text(text)) if not (len(w) == 1 and cjk.runs(w))}


def check_set(data: dict[str, Any]) -> None:
    texts = {m["id"]: m["text"] for m in data["messages"]}
    bad = [(q["q"], sorted(words(q["q"]) & words(texts[q["target"]])))
           for q in data["questions"] if q["group"] in ("paraphrase", "multilingual", "crosslingual")
           and words(q["q"]) & words(texts[q["target"]])]
    if bad:
        raise SystemExit(f"questions that share words with their target: {bad}")


def metrics(ranks: Sequence[int | None]) -> dict[str, float]:
    """recall@1, recall@5 and MRR of 1-based ranks (None: not in the first DEPTH)."""
    n = len(ranks)
    return {"n": n, "recall@1": round(sum(r == 1 for r in ranks) / n, 3),
            "recall@5": round(sum(r is not None and r <= 5 for r in ranks) / n, 3),
            "mrr": round(sum(1 / r for r in ranks if r) / n, 3)}


def rank_of(ordered: Sequence[str], target: str) -> int | None:
    return ordered.index(target) + 1 if target in ordered[:DEPTH] else None


def rrf(*lists: Sequence[str]) -> list[str]:
    score: dict[str, float] = {}
    for ordered in lists:
        for rank, mid in enumerate(ordered[:DEPTH], 1):
            score[mid] = score.get(mid, 0.0) + 1 / (RRF_K + rank)
    return sorted(score, key=lambda mid: -score[mid])


async def embed_all(embedder: Embedder, texts: list[str]) -> np.ndarray:
    return await embedder.embed(texts)


def truncated(vectors: np.ndarray, dims: int) -> np.ndarray:
    return unit_rows(vectors[:, :dims])


# --- the product's own search ------------------------------------------------------------------------------

def events(data: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The messages as sessions of six, roles alternating, one timestamp a message."""
    out = []
    msgs = data["messages"]
    for s in range(0, len(msgs), 6):
        parent = None
        evs = []
        for i, m in enumerate(msgs[s:s + 6]):
            evs.append({"type": "message", "id": m["id"], "parentId": parent,
                        "message": {"role": "user" if i % 2 == 0 else "assistant", "content": m["text"],
                                    "timestamp": 1_700_000_000_000 + (s + i) * 60_000}})
            parent = m["id"]
        out.append((f"agent:main:meaning:{s // 6}", evs))
    return out


async def engine_ranks(data: dict[str, Any], work: Path, min_score: float | None) -> dict[str, Any]:
    """Each question's ordered message ids per mode through Engine.search; modes it refuses are
    reported as not available with the error it gave."""
    data_dir = work / "engine"
    shutil.rmtree(data_dir, ignore_errors=True)
    out: dict[str, Any] = {"modes": {}, "unavailable": {}}
    floor = {} if min_score is None else {"semantic_min_score": min_score}
    settings = Settings(data_dir=str(data_dir), **floor)
    out["semantic_min_score"] = settings.semantic_min_score
    async with Engine(data_dir, settings=settings) as engine:
        for i, (key, evs) in enumerate(events(data)):
            await engine.append(AppendParams(sessionKey=key, events=evs, sessionId=f"meaning-{i}"))
        for mode in ("keyword", "semantic", "hybrid"):
            body: dict[str, Any] = {"agentId": "main", "limit": DEPTH}
            if mode != "keyword":
                body["mode"] = mode
            try:
                await engine.search(SearchParams.of({**body, "query": "probe"}))
            except InvalidRequest as exc:
                out["unavailable"][mode] = str(exc)
                continue
            if mode != "keyword":  # embedded in the background: drain it here (or wait for it)
                drain = getattr(engine, "embed_pending", None)
                deadline = time.monotonic() + 120
                while (await engine.search(SearchParams.of({**body, "query": "probe"}))).get("indexing"):
                    if time.monotonic() > deadline:
                        out["unavailable"][mode] = "still indexing after 120 s"
                        break
                    await (drain() if drain is not None else asyncio.sleep(0.2))
                if mode in out["unavailable"]:
                    continue
            ordered = []
            for q in data["questions"]:
                answer = await engine.search(SearchParams.of({**body, "query": q["q"]}))
                ordered.append([hit["messageId"] for hit in answer["results"]])
            out["modes"][mode] = ordered
    return out


# --- throughput on one core ----------------------------------------------------------------------------------

def realistic_messages(data: dict[str, Any], n: int, seed: int = 20261202) -> list[str]:
    english = [m["text"] for m in data["messages"] if m["text"].isascii()]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        target = int(min(4000, max(12, rng.lognormvariate(5.3, 0.9))))
        parts, size = [], 0
        while size < target:
            parts.append(rng.choice(english))
            size += len(parts[-1]) + 1
        text = " ".join(parts)[:target]
        out.append(text.rsplit(" ", 1)[0] if " " in text[:-1] else text)
    return out


def throughput_child(n: int) -> dict[str, Any]:
    data = json.loads(SET.read_text())
    texts = realistic_messages(data, n)
    lengths = sorted(map(len, texts))
    model = BuiltinEmbedder.load()
    model.embed_now(texts[:512])  # warm: first calls page in the table
    out: dict[str, Any] = {"messages": n, "chars_median": lengths[n // 2],
                           "chars_mean": round(sum(lengths) / n, 1), "chars_max": lengths[-1]}
    import wordllama

    library = wordllama.WordLlama.load(config="l2_supercat", dim=256, cache_dir=Path(wordllama.__file__).parent,
                                       disable_download=True)
    ways = {"batch256": (lambda chunk: model.embed_now(chunk), 256, texts),
            "batch64": (lambda chunk: model.embed_now(chunk), 64, texts),
            # the library's own embed (pads each batch to its longest text), on a quarter of the texts
            "library_embed_batch64": (lambda chunk: library.embed(chunk, norm=False), 64, texts[:n // 4])}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for _ in range(3):  # interleaved, the median of three
        for name, (embed, batch, some) in ways.items():
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(0, len(some), batch):
                embed(some[i:i + batch])
            runs[name].append((len(some) / (time.process_time() - cpu), len(some) / (time.perf_counter() - wall)))
    for name, measured in runs.items():
        out[f"{name}_msgs_per_cpu_s"] = round(statistics.median(c for c, _ in measured))
        out[f"{name}_msgs_per_wall_s"] = round(statistics.median(w for _, w in measured))
    out["speedup_over_library_embed"] = round(out["batch64_msgs_per_cpu_s"] / out["library_embed_batch64_msgs_per_cpu_s"], 2)
    queries = [q["q"] for q in data["questions"]] * 10
    times = []
    for q in queries:
        t = time.perf_counter()
        model.embed_now([q])
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    out["query_ms_p50"] = round(times[len(times) // 2], 3)
    out["query_ms_p95"] = round(times[int(len(times) * 0.95)], 3)
    return out


def throughput(n: int) -> dict[str, Any]:
    core = str(max(os.sched_getaffinity(0)))
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    cmd = ["taskset", "-c", core, sys.executable, __file__, "--throughput-child", str(n)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return {"core": int(core), **json.loads(done.stdout.strip().splitlines()[-1])}


# --- calibration ---------------------------------------------------------------------------------------------

def calibrate(data: dict[str, Any], ids: list[str], vectors: np.ndarray, qvec: np.ndarray) -> dict[str, Any]:
    qs = data["questions"]
    pick = [i for i, q in enumerate(qs) if q["group"] in ("paraphrase", "multilingual")]
    sims = qvec[pick] @ vectors.T
    target = np.array([ids.index(qs[i]["target"]) for i in pick])
    right = sims[np.arange(len(pick)), target]
    ranks = (sims > right[:, None]).sum(axis=1) + 1
    unrelated = np.delete(sims.ravel(), np.arange(len(pick)) * len(ids) + target)
    unans_pick = [i for i, q in enumerate(qs) if q["group"] == "unanswerable"]
    nearest = (qvec[unans_pick] @ vectors.T).max(axis=1)

    def pct(a: np.ndarray) -> dict[str, float]:
        return {f"p{p}": round(float(np.percentile(a, p)), 3) for p in (5, 25, 50, 75, 95, 99)}

    grid = []
    for t in GRID:
        grid.append({"floor": t, "first_kept": round(float((right[ranks == 1] >= t).mean()), 3),
                     "top5_kept": round(float((right[ranks <= 5] >= t).mean()), 3),
                     "unrelated_kept": round(float((unrelated >= t).mean()), 4),
                     "unanswerable_answered": round(float((nearest >= t).mean()), 3)})
    fits = [g for g in grid if g["first_kept"] >= 0.95 and g["top5_kept"] >= 0.90]
    chosen = max(fits, key=lambda g: g["floor"]) if fits else grid[0]
    return {"right": pct(right), "unrelated": pct(unrelated), "unanswerable_nearest": pct(nearest),
            "grid": grid, "chosen": chosen,
            "rule": "highest floor keeping >= 95% of targets ranked first and >= 90% of targets in the top 5"}


# --- the run -------------------------------------------------------------------------------------------------

async def run(args: argparse.Namespace) -> dict[str, Any]:
    data = json.loads(SET.read_text())
    check_set(data)
    ids = [m["id"] for m in data["messages"]]
    texts = [m["text"] for m in data["messages"]]
    questions = [q for q in data["questions"] if q["group"] in GROUPS]
    everything = data["questions"]
    group_of = [q["group"] for q in questions]

    embedders: dict[str, Embedder] = {"builtin": BuiltinEmbedder.load()}
    if args.openai_url:
        from sessionsearch.embed.openai import OpenAIEmbedder

        embedders["openai"] = OpenAIEmbedder(url=args.openai_url, model_name=args.openai_model,
                                             dimensions=args.openai_dimensions,
                                             api_key=os.environ.get("SESSIONSEARCH_EMBEDDER_API_KEY"))
    vectors: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    speed: dict[str, float] = {}
    for name, embedder in embedders.items():
        t = time.perf_counter()
        mv = await embed_all(embedder, texts)
        qv = await embed_all(embedder, [q["q"] for q in everything])
        speed[name] = round((len(texts) + len(everything)) / (time.perf_counter() - t))
        vectors[f"{name} ({embedder.model})"] = (mv, qv)
    builtin_key = next(iter(vectors))
    bm, bq = vectors[builtin_key]
    for dims in (128, 64):
        vectors[f"builtin first {dims} dims"] = (truncated(bm, dims), truncated(bq, dims))

    calibration = {name: calibrate(data, ids, mv, qv) for name, (mv, qv) in vectors.items()}
    floor = calibration[builtin_key]["chosen"]["floor"]

    q_index = [everything.index(q) for q in questions]
    orders: dict[str, list[list[str]]] = {}
    for name, (mv, qv) in vectors.items():
        sims = qv[q_index] @ mv.T
        orders[f"semantic exact {name}"] = [[ids[j] for j in np.argsort(-row, kind="stable")] for row in sims]
    with tempfile.TemporaryDirectory(prefix="bench-meaning-") as tmp:
        engine = await engine_ranks({**data, "questions": questions}, Path(tmp), args.min_score)
    orders["keyword (engine)"] = engine["modes"]["keyword"]
    sims = bq[q_index] @ bm.T
    floored = [[ids[j] for j in np.argsort(-row, kind="stable") if row[j] >= floor] for row in sims]
    orders[f"hybrid rrf (bench: builtin >= {floor} + keyword)"] = [
        rrf(s, k) for s, k in zip(floored, engine["modes"]["keyword"], strict=True)]
    for mode in ("semantic", "hybrid"):
        if mode in engine["modes"]:
            orders[f"{mode} (engine, floor {engine['semantic_min_score']})"] = engine["modes"][mode]

    quality: dict[str, dict[str, Any]] = {}
    by_lang: dict[str, dict[str, Any]] = {}
    for name, ordered in orders.items():
        ranks = [rank_of(o, q["target"]) for o, q in zip(ordered, questions, strict=True)]
        quality[name] = {g: metrics([r for r, gg in zip(ranks, group_of, strict=True) if gg == g]) for g in GROUPS}
        quality[name]["all_but_keyword"] = metrics([r for r, g in zip(ranks, group_of, strict=True) if g != "keyword"])
        by_lang[name] = {lang: metrics([r for r, q in zip(ranks, questions, strict=True) if q.get("lang") == lang])
                         for lang in sorted({q["lang"] for q in questions if "lang" in q})}

    kw = [i for i, g in enumerate(group_of) if g == "keyword"]
    keeps: dict[str, Any] = {}
    for name in [n for n in orders if n.startswith("hybrid")]:
        kept = [bool(orders["keyword (engine)"][i]) and orders["keyword (engine)"][i][0] in orders[name][i][:3]
                for i in kw]
        keeps[name] = {"kept": sum(kept), "of": len(kept)}
    misses = [{"q": q["q"], "target": q["target"], "rank": rank_of(o, q["target"])}
              for o, q in zip(orders[f"semantic exact {builtin_key}"], questions, strict=True)
              if q["group"] != "keyword" and (rank_of(o, q["target"]) or 99) > 5]

    return {
        "bench": "meaning", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_1m": os.getloadavg()[0]},
        "set": {"messages": len(ids), **{g: sum(q["group"] == g for q in everything)
                                          for g in (*GROUPS, "unanswerable")}},
        "quality": quality, "multilingual_by_language": by_lang, "hybrid_keeps_keyword_top_hit_in_top3": keeps,
        "engine_modes_unavailable": engine["unavailable"],
        "builtin_semantic_misses_past_5": misses,
        "calibration": calibration, "semantic_min_score_chosen": floor,
        "set_embed_texts_per_s": speed,
        "throughput_builtin_one_core": throughput(args.messages),
    }


def print_table(result: dict[str, Any]) -> None:
    print(f"{'method':58} " + " ".join(f"{g[:12]:>20}" for g in (*GROUPS, "all_but_keyword")))
    print(f"{'':58} " + " ".join(f"{'r@1  r@5  mrr':>20}" for _ in range(len(GROUPS) + 1)))
    for name, groups in result["quality"].items():
        cells = [f"{m['recall@1']:.2f} {m['recall@5']:.2f} {m['mrr']:.2f}" for m in groups.values()]
        print(f"{name[:58]:58} " + " ".join(f"{c:>20}" for c in cells))
    for name, k in result["hybrid_keeps_keyword_top_hit_in_top3"].items():
        print(f"{name}: keyword top hit in top 3 for {k['kept']}/{k['of']} keyword questions")
    if result["engine_modes_unavailable"]:
        print("engine modes not available:", result["engine_modes_unavailable"])
    t = result["throughput_builtin_one_core"]
    print(f"builtin on one core: {t['batch256_msgs_per_cpu_s']:,} msgs/CPU-s (wall {t['batch256_msgs_per_wall_s']:,}) "
          f"batch 256, {t['batch64_msgs_per_cpu_s']:,} batch 64 ({t['speedup_over_library_embed']}x the library's "
          f"embed); median {t['chars_median']} chars; "
          f"query p50 {t['query_ms_p50']} ms p95 {t['query_ms_p95']} ms")
    for name, c in result["calibration"].items():
        print(f"calibration {name}: right {c['right']['p5']}/{c['right']['p50']} (p5/p50), unrelated p95 "
              f"{c['unrelated']['p95']} p99 {c['unrelated']['p99']}, unanswerable nearest p50 "
              f"{c['unanswerable_nearest']['p50']}; floor {c['chosen']['floor']}: {c['chosen']}")
    print("semantic_min_score chosen:", result["semantic_min_score_chosen"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--openai-url", default=os.environ.get("SESSIONSEARCH_EMBEDDER_URL"))
    parser.add_argument("--openai-model", default=os.environ.get("SESSIONSEARCH_EMBEDDER_MODEL"))
    parser.add_argument("--openai-dimensions", type=int,
                        default=int(os.environ.get("SESSIONSEARCH_EMBEDDER_DIMENSIONS") or 0) or None)
    parser.add_argument("--messages", type=int, default=20_000, help="messages of the throughput run")
    parser.add_argument("--min-score", type=float, default=None,
                        help="search.semanticMinScore of the engine's semantic and hybrid runs (default: the setting's)")
    parser.add_argument("--throughput-child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "meaning.json")
    args = parser.parse_args()
    if args.throughput_child:
        print(json.dumps(throughput_child(args.throughput_child)))
        return
    if args.openai_url and not (args.openai_model and args.openai_dimensions):
        parser.error("--openai-url needs --openai-model and --openai-dimensions")
    sslogging.configure("WARNING")
    result = asyncio.run(run(args))
    print_table(result)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
