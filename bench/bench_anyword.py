"""What hybrid's any-word keyword half costs: one agent of N messages (default 20,000), SQLite and
PostgreSQL, the builtin model.

    nice -n 10 .venv/bin/python bench/bench_anyword.py [--messages 20000] [--stores sqlite,postgres]

Per store: the corpus of bench/bench_semantic.py (built and embedded once, reused), then for each of
40 eight-word questions (five words of a message, three of the corpus's 50 commonest), interleaved
question by question: keyword search, and hybrid search with its keyword half made four ways:

- `every word`: keyword mode's list only (before the any-word half);
- `per word`: each word's own keyword search, one after another, BM25 summed (the algorithm
  search/anyword.py had before the OR-ed statement; kept here only to compare);
- `or-ed`: search/anyword.py, one statement of the words OR-ed.

p50/p95 of each, the load average next to them, and how often `per word` and `or-ed` give hybrid
the same top 10 (they differ only where a row fell past one word's top 50 in `per word`, which then
lost that word's share). Figures go to bench/results/anyword.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_semantic  # noqa: E402
from corpus import CorpusSpec, generate  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.protocol import SearchParams  # noqa: E402
from sessionsearch.search import meaning  # noqa: E402
from sessionsearch.search.anyword import any_word, any_words  # noqa: E402
from sessionsearch.search.outcome import Outcome  # noqa: E402
from sessionsearch.search.query import ParsedQuery, build_match  # noqa: E402

HERE = Path(__file__).resolve().parent
bench_semantic.PG_DB = "sessionsearch_bench_hybrid_anyword"  # this bench's own database
QUESTIONS = 40

Run = Callable[[ParsedQuery], Awaitable[Outcome]]


async def every_word(run: Run, query: ParsedQuery, all_words: Outcome) -> Outcome:
    return all_words


async def per_word(run: Run, query: ParsedQuery, all_words: Outcome) -> Outcome:
    """The replaced algorithm: each word's keyword search in turn, BM25 summed, cut to the depth."""
    words, prefix = any_words(query)
    if len(words) <= 1:
        return all_words
    out = Outcome()
    rank: dict[tuple[str, int], float] = {}
    first: dict[tuple[str, int], Any] = {}
    for word in words:
        last = prefix and word == words[-1]
        found = await run(replace(query, text=word, words=[word], prefix=last, match=build_match([word], last), terms=[]))
        out.more |= found.more
        for hit in found.hits:
            key = (hit.agent_id, hit.rid)
            rank[key] = rank.get(key, 0.0) + hit.rank
            first.setdefault(key, hit)
    hits = sorted(first.values(), key=lambda h: (rank[(h.agent_id, h.rid)], -h.ts, h.message_id))
    for hit in hits:
        hit.rank = rank[(hit.agent_id, hit.rid)]
    out.hits = hits[:meaning.FUSE_DEPTH]
    return out


VARIANTS: dict[str, Any] = {"every word": every_word, "per word": per_word, "or-ed": any_word}


def questions(spec: CorpusSpec) -> list[str]:
    rng = random.Random(39)
    texts = [t for _, session in generate(CorpusSpec(messages=4000, sessions=40, seed=spec.seed)) for _, t in session]
    common = [w for w, _ in Counter(w for t in texts for w in t.split()).most_common(50)]
    out = []
    while len(out) < QUESTIONS:
        words = rng.choice(texts).split()
        if len(words) >= 5:
            picked = rng.sample(words, 5) + rng.sample(common, 3)
            rng.shuffle(picked)
            out.append(" ".join(picked))
    return out


async def run_store(kind: str, n: int, reps: int) -> dict[str, Any]:
    spec = CorpusSpec(messages=n, sessions=max(10, n // 100))
    work = HERE / "work" / f"anyword-{n}-{kind}"
    build = await bench_semantic.build(kind, spec, work)
    settings = bench_semantic.settings_for(kind, work)
    async with Engine(work, settings=settings) as engine:
        if not (work / "embedded").exists():
            await engine.embed_pending()
            (work / "embedded").write_text("1")
    qs = questions(spec)
    times: dict[str, list[float]] = {"keyword": [], **{name: [] for name in VARIANTS}}
    tops: dict[str, dict[str, list[str]]] = {name: {} for name in VARIANTS}
    loads = [os.getloadavg()[0]]
    async with Engine(work, settings=settings) as engine:
        await engine.search(SearchParams(query=qs[0], mode="semantic"))  # the vectors loaded
        for rep in range(reps + 1):  # the first round warms the caches, unmeasured
            for q in qs:
                t = time.perf_counter()
                await engine.search(SearchParams(query=q))
                if rep:
                    times["keyword"].append((time.perf_counter() - t) * 1000)
                for name, variant in VARIANTS.items():
                    meaning.any_word = variant  # type: ignore[assignment]
                    t = time.perf_counter()
                    found = await engine.search(SearchParams(query=q, mode="hybrid"))
                    if rep:
                        times[name].append((time.perf_counter() - t) * 1000)
                    tops[name][q] = [h["messageId"] for h in found["results"]]
            loads.append(os.getloadavg()[0])
        meaning.any_word = any_word
    same = sum(tops["per word"][q] == tops["or-ed"][q] for q in qs)
    return {"corpus": {**build, "messages": n, "questions": len(qs)},
            "ms": {name: {"p50": round(pct(v, 0.5), 1), "p95": round(pct(v, 0.95), 1)} for name, v in times.items()},
            "same_top10_per_word_vs_ored": f"{same}/{len(qs)}",
            "load_1min": [round(x, 1) for x in loads]}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--stores", default="sqlite,postgres")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    sslogging.configure("WARNING")
    result: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "note": "2 cores shared with other work; variants interleaved question by question",
                              "stores": {}}
    for kind in args.stores.split(","):
        result["stores"][kind] = await run_store(kind, args.messages, args.reps)
        print(json.dumps({kind: result["stores"][kind]}, indent=1))
        (HERE / "results").mkdir(exist_ok=True)
        (HERE / "results" / "anyword.json").write_text(json.dumps(result, indent=2) + "\n")
    if "postgres" in args.stores.split(","):
        import psycopg

        with psycopg.connect(bench_semantic.PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {bench_semantic.PG_DB}")
        shutil.rmtree(HERE / "work" / f"anyword-{args.messages}-postgres", ignore_errors=True)  # its build is gone


if __name__ == "__main__":
    asyncio.run(main())
