"""What the score bounds' upkeep (store/sqlite/bounds.py, keep_added/keep_removed) costs a write.

One agent database of --messages corpus messages (bench/corpus.py: Zipf words, 8% with an accented
word, 4% CJK), copied once per variant, then on each copy in turn (rounds alternating, so the
machine's load falls on every variant alike): ten one-message appends, a 100-message append (a new
session each round: an import chunk's or a reconcile rebuild's shape) and that session's deletion.
Variants, side by side in one process:

- `none`: the upkeep skipped (the writes before bounds were kept);
- `base`: bounds.py of --base (git show), loaded in place of the working tree's;
- `new`: the working tree's bounds.py.

    .venv/bin/python bench/bench_bounds_upkeep.py --rounds 60
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus import CorpusSpec, generate  # noqa: E402
from stats import HERE, commit, pct  # noqa: E402

from sessionsearch.store.sqlite import bounds as new_bounds  # noqa: E402
from sessionsearch.store.sqlite import postings  # noqa: E402
from sessionsearch.store.sqlite.writer import SqliteWriter  # noqa: E402
from sessionsearch.transcript.events import parse_event  # noqa: E402

ONES = 10  # one-message appends a round


def base_bounds(rev: str) -> types.ModuleType:
    """bounds.py as of `rev`, loaded as a module of the package (its relative imports resolve)."""
    source = subprocess.run(["git", "-C", str(HERE.parent), "show", f"{rev}:sessionsearch/store/sqlite/bounds.py"],
                            check=True, capture_output=True, text=True).stdout
    path = HERE / "work" / "bounds_base.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("sessionsearch.store.sqlite._bounds_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    keep_added = module.keep_added
    if "Callable" not in source:  # `only` a bool there, asked before every upkeep as the base did
        module.keep_added = lambda c, texts, *, only: keep_added(c, texts, only=only())  # type: ignore[attr-defined]
    return module


def skipped() -> types.ModuleType:
    module = types.ModuleType("no_upkeep")
    module.keep_added = lambda c, texts, *, only: None  # type: ignore[attr-defined]
    module.keep_removed = lambda c, texts: None  # type: ignore[attr-defined]
    return module


def texts(n: int) -> list[str]:
    out: list[str] = []
    for _, session in generate(CorpusSpec(messages=max(n, 1000), sessions=max(n // 100, 10))):
        out.extend(text for _, text in session)
        if len(out) >= n:
            break
    return out[:n]


def events(prefix: str, batch: list[str], ts: int) -> list[Any]:
    parent = None
    out = []
    for i, text in enumerate(batch):
        mid = f"{prefix}-{i}"
        out.append(parse_event({"type": "message", "id": mid, "parentId": parent, "message": {
            "role": "user" if i % 2 else "assistant", "content": text, "timestamp": ts + i}}, "e"))
        parent = mid
    return out


def wal_pages(seed: Path, work: Path, variants: dict[str, types.ModuleType], pool: list[str]) -> dict[str, Any]:
    """The pages an append's commit writes to the WAL (what the upkeep's scattered upserts add),
    on a fresh copy of the seed per variant, no checkpoint between."""
    out: dict[str, Any] = {}
    for name, module in variants.items():
        shutil.copy(seed, work / f"wal-{name}.sqlite")
        w = SqliteWriter(work / f"wal-{name}.sqlite", work / "cold", busy_timeout_ms=5000, checkpoint_beside=False)
        w.c.execute("PRAGMA wal_autocheckpoint = 0")
        postings.kept_bounds = module  # type: ignore[assignment]
        for size in (1, 100):
            got = []
            for r in range(5):
                w.c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                batch = pool[r * 200:r * 200 + size]
                w.append(f"agent:a:wal{size}-{r}", events(f"w{size}-{r}", batch, 1_900_000_000_000 + r * 1000),
                         None, True, None)
                got.append(w.c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
            out.setdefault(name, {})[f"append_{size}"] = sorted(got)[2]
        w.close()
    postings.kept_bounds = new_bounds
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000, help="messages in the database before the writes")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--base", default="main", help="the commit whose bounds.py the `base` variant runs")
    parser.add_argument("--cache-kib", type=int, default=0, help="the writers' page cache (0: SQLite's default)")
    parser.add_argument("--out", default=str(HERE / "results" / "bounds-upkeep.json"))
    args = parser.parse_args()

    work = HERE / "work" / "bounds-upkeep"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pool = texts(args.messages + args.rounds * (ONES + 100) + 1000)
    seed = work / "seed.sqlite"
    w = SqliteWriter(seed, work / "cold", busy_timeout_ms=5000, checkpoint_beside=False)
    for start in range(0, args.messages, 1000):
        w.append(f"agent:a:s{start}", events(f"s{start}", pool[start:start + 1000], 1_700_000_000_000 + start),
                 None, True, None)
    w.c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    w.close()
    variants = {"none": skipped(), "base": base_bounds(args.base), "new": new_bounds}
    writers = {}
    for name in variants:
        shutil.copy(seed, work / f"{name}.sqlite")
        # checkpoints beside the writer, as deployed: a write's time is its own, not the WAL's copy-back
        writers[name] = SqliteWriter(work / f"{name}.sqlite", work / "cold", busy_timeout_ms=5000)
        if args.cache_kib:
            writers[name].c.execute(f"PRAGMA cache_size = -{args.cache_kib}")
    times: dict[str, dict[str, list[float]]] = {n: {"append_1": [], "append_100": [], "delete_100": []}
                                                for n in variants}
    distinct = []
    at = args.messages
    for r in range(args.rounds):
        ones, hundred = pool[at:at + ONES], pool[at + ONES:at + ONES + 100]
        at += ONES + 100
        distinct.append(len({t for text in hundred for t in new_bounds.token_counts([text])[0]}))
        batch1 = events(f"o{r}", ones, 1_800_000_000_000 + r * 1000)
        batch100 = events(f"h{r}", hundred, 1_800_000_000_000 + r * 1000)
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            postings.kept_bounds = variants[name]  # type: ignore[assignment]
            w = writers[name]
            for event in batch1:  # a live session's appends, one message each
                started = time.perf_counter()
                w.append(f"agent:a:live{name}{r}", [event], None, True, None)
                times[name]["append_1"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            w.append(f"agent:a:chunk{r}", batch100, None, True, None)
            times[name]["append_100"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            w.delete_session(f"agent:a:chunk{r}")
            times[name]["delete_100"].append((time.perf_counter() - started) * 1000)
    postings.kept_bounds = new_bounds
    for w in writers.values():
        w.close()
    pages = wal_pages(seed, work, variants, pool[at:])
    shutil.rmtree(work, ignore_errors=True)
    out: dict[str, Any] = {"commit": commit(), "base": args.base, "messages": args.messages, "rounds": args.rounds,
                           "distinct_terms_per_100": round(sum(distinct) / len(distinct)), "ms": {}}
    out["wal_pages_a_commit"] = pages
    print(f"{args.messages} messages, {args.rounds} rounds, ~{out['distinct_terms_per_100']} distinct terms per 100")
    for op in ("append_1", "append_100", "delete_100"):
        for name in variants:
            got = times[name][op]
            out["ms"].setdefault(op, {})[name] = {"p50": round(pct(got, 0.5), 3), "p95": round(pct(got, 0.95), 3)}
        row = out["ms"][op]
        print(f"{op:>11}: " + "  ".join(f"{n} {row[n]['p50']:.2f}/{row[n]['p95']:.2f}" for n in variants)
              + f"  (p50/p95 ms; new/none {row['new']['p50'] / row['none']['p50']:.2f}x,"
                f" base/none {row['base']['p50'] / row['none']['p50']:.2f}x)")
    print("WAL pages a commit (median of 5; 1 message, 100 messages): "
          + "  ".join(f"{n} {p['append_1']}, {p['append_100']}" for n, p in pages.items()))
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
