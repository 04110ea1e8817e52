"""Search and append benchmark at 1,000,000 messages in one agent, side by side with bare FTS5.

    .venv/bin/python bench/bench_search.py [--messages 1000000] [--reps 30]

Builds (or reuses) a sessionsearch data dir and a bare FTS5 database holding the same texts, then
measures, interleaved query by query: search latency p50/p95 per query class through the Python
API next to `MATCH … ORDER BY bm25 LIMIT 26` on the plain FTS5 table (through aiosqlite, as ours;
the same mapped, as our readers read a quiet store; and through the sqlite3 module for reference);
append+index throughput one message per transaction and in batches of 100 next to bare inserts;
then, on copies, the common words again after `optimize` gave them postings, and appends with the
index log that keeps those exact; peak RSS. Figures go to bench/results/search.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import aiosqlite

from sessionsearch.protocol import AppendParams, SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import CorpusSpec, generate  # noqa: E402
from stats import commit, pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.store.sqlite.fts import quote  # noqa: E402

HERE = Path(__file__).resolve().parent
BARE_SQL = "SELECT rowid, bm25(f) FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT 26"


def built_data(messages: int) -> Path:
    """The work dir this benchmark built for `messages` (other benchmarks reuse it), or exit."""
    work = HERE / "work" / f"search-{messages}"
    if not (work / "build.json").exists():
        sys.exit(f"no benchmark data in {work}: run bench/bench_search.py first")
    return work


def events_for(session: int, texts: list[tuple[str, str]], start: int = 0) -> list[dict]:
    out, parent = [], (f"s{session}-{start - 1}" if start else None)
    for i, (role, text) in enumerate(texts, start):
        mid = f"s{session}-{i}"
        out.append({"type": "message", "id": mid, "parentId": parent,
                    "message": {"role": role, "content": text, "timestamp": 1_700_000_000_000 + session * 10_000 + i}})
        parent = mid
    return out


async def build(spec: CorpusSpec, work: Path) -> dict:
    """Write the corpus into both stores, batches of 100 per transaction, timing each side."""
    data_dir, bare_path = work / "data", work / "bare.db"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ours_s = bare_s = 0.0
    n = 0
    bare = sqlite3.connect(bare_path, isolation_level=None)
    bare.execute("PRAGMA journal_mode = WAL")
    bare.execute("PRAGMA synchronous = NORMAL")
    bare.execute("CREATE VIRTUAL TABLE f USING fts5(text, ts UNINDEXED, tokenize = 'unicode61 remove_diacritics 2')")
    async with Engine(data_dir, settings=Settings(data_dir=str(data_dir))) as engine:
        for session, texts in generate(spec):
            key = f"agent:main:bench:{session}"
            for start in range(0, len(texts), 100):
                chunk = texts[start:start + 100]
                events = events_for(session, chunk, start)
                t = time.perf_counter()
                await engine.append(AppendParams(sessionKey=key, events=events, sessionId=f"w{session}"))
                ours_s += time.perf_counter() - t
                t = time.perf_counter()
                bare.execute("BEGIN")
                bare.executemany("INSERT INTO f (text, ts) VALUES (?, ?)",
                                 [(e["message"]["content"], e["message"]["timestamp"]) for e in events])
                bare.execute("COMMIT")
                bare_s += time.perf_counter() - t
                n += len(chunk)
            if session % 1000 == 0:
                print(f"  built {n:,} messages", file=sys.stderr)
    bare.close()
    return {"messages": n, "ours_batch100_msgs_per_s": n / ours_s, "bare_batch100_msgs_per_s": n / bare_s}


async def single_tx_rates(work: Path, count: int) -> dict:
    """One message per transaction, alternating ours and bare, on fresh small stores."""
    scratch = work / "single"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    bare = await aiosqlite.connect(scratch / "bare.db", isolation_level=None)
    await bare.execute("PRAGMA journal_mode = WAL")
    await bare.execute("PRAGMA synchronous = NORMAL")
    await bare.execute("CREATE VIRTUAL TABLE f USING fts5(text, tokenize = 'unicode61 remove_diacritics 2')")
    texts = next(generate(CorpusSpec(messages=count, sessions=1)))[1]
    ours_s = bare_s = 0.0
    async with Engine(scratch / "data", settings=Settings(data_dir=str(scratch / "data"))) as engine:
        for i, (role, text) in enumerate(texts):
            event = events_for(0, [(role, text)], i)
            t = time.perf_counter()
            await engine.append(AppendParams(sessionKey="agent:main:single", events=event, sessionId="w0"))
            ours_s += time.perf_counter() - t
            t = time.perf_counter()
            await bare.execute("BEGIN IMMEDIATE")
            await bare.execute("INSERT INTO f (text) VALUES (?)", (text,))
            await bare.execute("COMMIT")
            bare_s += time.perf_counter() - t
    await bare.close()
    shutil.rmtree(scratch, ignore_errors=True)
    return {"ours_single_tx_msgs_per_s": count / ours_s, "bare_single_tx_msgs_per_s": count / bare_s}


def pick_words(bare_path: Path, total: int) -> dict[str, list[str]]:
    """Words whose document frequency is nearest each class's target share."""
    conn = sqlite3.connect(bare_path)
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.v USING fts5vocab(main, f, 'row')")
    rows = conn.execute("SELECT term, doc FROM temp.v WHERE term GLOB '[a-z]*'").fetchall()
    conn.close()
    targets = {"rare": 12 / total, "mid_0.3pct": 0.003, "common_1pct": 0.01, "common_10pct": 0.10}
    out = {}
    for name, share in targets.items():
        ranked = sorted(rows, key=lambda r: abs(r[1] / total - share))
        out[name] = [t for t, _ in ranked[:5]]
    return out


async def measure(work: Path, reps: int, total: int) -> dict:
    words = pick_words(work / "bare.db", total)
    mid = words["mid_0.3pct"]
    classes: dict[str, list[tuple[dict, str, str]]] = {}  # name -> [(our body, bare sql, bare match)]
    for name in ("rare", "mid_0.3pct", "common_1pct", "common_10pct"):
        classes[name] = [({"query": w}, BARE_SQL, quote(w)) for w in words[name]]
    classes["two_words"] = [({"query": f"{a} {b}"}, BARE_SQL, f"{quote(a)} AND {quote(b)}")
                            for a, b in zip(words["common_1pct"], words["common_10pct"])]
    classes["prefix"] = [({"query": w[:4], "match": "prefix"}, BARE_SQL, f"{quote(w[:4])} *") for w in mid]
    # by timestamp, as ours: the bare table keeps ts as an unindexed column
    classes["recent"] = [({"query": w, "order": "recent"},
                          "SELECT rowid, ts FROM f WHERE f MATCH ? ORDER BY ts DESC LIMIT 26", quote(w)) for w in mid]
    # for reference: insertion order, which FTS5 walks backwards without reading any row
    classes["recent_vs_bare_rowid_order"] = [
        ({"query": w, "order": "recent"}, "SELECT rowid FROM f WHERE f MATCH ? ORDER BY rowid DESC LIMIT 26", quote(w))
        for w in mid]
    data_dir = work / "data"
    async with Engine(data_dir, settings=Settings(data_dir=str(data_dir))) as engine:
        store = await engine.store("main")
        async with store.reader() as reader:
            (wid, key, n), = await reader.conn.execute_fetchall(
                "SELECT wid, session_key, messages FROM windows ORDER BY messages DESC LIMIT 1")
        bare_rows = await _bare_range(work / "bare.db", key, data_dir)
        classes["session_scoped"] = [({"query": w, "sessionKeys": [key]},
                                      f"SELECT rowid, bm25(f) FROM f WHERE f MATCH ? AND rowid BETWEEN "
                                      f"{bare_rows[0]} AND {bare_rows[1]} ORDER BY bm25(f) LIMIT 26", quote(w))
                                     for w in words["common_10pct"]]
        bare = await aiosqlite.connect(work / "bare.db")
        # like for like: bare FTS5 mapped, as our readers read while the store is quiet
        bare_m = await aiosqlite.connect(work / "bare.db")
        await bare_m.execute("PRAGMA mmap_size = 2147418112")
        sync_bare = sqlite3.connect(work / "bare.db")
        results = {}
        for name, items in classes.items():
            ours, bare_a, bare_s, bare_am = [], [], [], []
            for body, sql, match in items:  # warm both caches once
                await engine.search(SearchParams.of({**body, "limit": 25}))
                await bare.execute_fetchall(sql, (match,))
                await bare_m.execute_fetchall(sql, (match,))
            for _ in range(reps):
                for body, sql, match in items:
                    t = time.perf_counter()
                    await engine.search(SearchParams.of({**body, "limit": 25}))
                    ours.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    await bare.execute_fetchall(sql, (match,))
                    bare_a.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    await bare_m.execute_fetchall(sql, (match,))
                    bare_am.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    sync_bare.execute(sql, (match,)).fetchall()
                    bare_s.append(time.perf_counter() - t)
            row = {
                "words": [b["query"] for b, _, _ in items],
                "ours_p50_ms": statistics.median(ours) * 1000, "ours_p95_ms": pct(ours, 0.95) * 1000,
                "bare_aiosqlite_p50_ms": statistics.median(bare_a) * 1000,
                "bare_aiosqlite_p95_ms": pct(bare_a, 0.95) * 1000,
                "bare_aiosqlite_mapped_p50_ms": statistics.median(bare_am) * 1000,
                "bare_sqlite3_p50_ms": statistics.median(bare_s) * 1000,
                "bare_sqlite3_p95_ms": pct(bare_s, 0.95) * 1000,
            }
            row["ratio_p50_vs_aiosqlite"] = row["ours_p50_ms"] / row["bare_aiosqlite_p50_ms"]
            row["ratio_p50_vs_sqlite3"] = row["ours_p50_ms"] / row["bare_sqlite3_p50_ms"]
            row["ratio_p50_vs_aiosqlite_mapped"] = row["ours_p50_ms"] / row["bare_aiosqlite_mapped_p50_ms"]
            results[name] = row
            print(f"{name:>15}: ours p50 {row['ours_p50_ms']:8.2f} ms p95 {row['ours_p95_ms']:8.2f} | bare(aiosqlite) "
                  f"p50 {row['bare_aiosqlite_p50_ms']:8.2f} p95 {row['bare_aiosqlite_p95_ms']:8.2f} | bare(sqlite3) "
                  f"p50 {row['bare_sqlite3_p50_ms']:8.2f} | x{row['ratio_p50_vs_aiosqlite']:.2f} | mapped bare "
                  f"{row['bare_aiosqlite_mapped_p50_ms']:8.2f} x{row['ratio_p50_vs_aiosqlite_mapped']:.2f}", file=sys.stderr)
        await bare.close()
        await bare_m.close()
        sync_bare.close()
    return results


async def postings_phase(work: Path, words: dict[str, list[str]], reps: int, appends: int = 20_000) -> dict:
    """On copies of both stores: `optimize`, then the 1% and 10% word classes again next to FTS5
    alone and bare FTS5 (each answer checked equal to FTS5 alone's), and appends in batches of
    100 with the index log on, off, and bare, interleaved."""
    copy, bare_copy = work / "optimized", work / "optimized-bare.db"
    shutil.rmtree(copy, ignore_errors=True)
    with sqlite3.connect(work / "data" / "agents" / "main.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copytree(work / "data", copy)
    shutil.copy(work / "bare.db", bare_copy)
    out: dict = {}
    db = copy / "agents" / "main.db"
    async with Engine(copy, settings=Settings(data_dir=str(copy))) as engine:
        size = db.stat().st_size
        t = time.perf_counter()
        built = (await engine.optimize())["agents"]["main"]["words"]
        out["optimize_seconds"] = time.perf_counter() - t
        out["words_with_postings"] = len(built)
        out["postings_rows"] = sum(w["rows"] for w in built.values())
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        out["database_growth_mb"] = (db.stat().st_size - size) / 2**20
        store = await engine.store("main")
        bare = await aiosqlite.connect(bare_copy)
        for name in ("common_1pct", "common_10pct"):
            times: dict[str, list[float]] = {"postings": [], "fts5_alone": [], "bare": []}
            exact = 0
            for w in words[name]:
                await engine.search(SearchParams.of({"query": w, "limit": 25}))  # the store learns which words have postings
                hot = await engine.search(SearchParams.of({"query": w, "limit": 25}))
                store._hot_seen = (None, frozenset())
                exact += hot == await engine.search(SearchParams.of({"query": w, "limit": 25}))
            for _ in range(reps):
                for w in words[name]:
                    t = time.perf_counter()
                    await engine.search(SearchParams.of({"query": w, "limit": 25}))
                    times["postings"].append(time.perf_counter() - t)
                    store._hot_seen = (None, frozenset())  # this search: FTS5 alone (the next one learns again)
                    t = time.perf_counter()
                    await engine.search(SearchParams.of({"query": w, "limit": 25}))
                    times["fts5_alone"].append(time.perf_counter() - t)
                    t = time.perf_counter()
                    await bare.execute_fetchall(BARE_SQL, (quote(w),))
                    times["bare"].append(time.perf_counter() - t)
            row = {"words": words[name], "with_postings": sum(w in built for w in words[name]),
                   "answers_equal_to_fts5_alone": f"{exact}/{len(words[name])}"}
            for kind, values in times.items():
                row[f"{kind}_p50_ms"] = statistics.median(values) * 1000
                row[f"{kind}_p95_ms"] = pct(values, 0.95) * 1000
            out[name] = row
            print(f"{name:>15} after optimize: postings p50 {row['postings_p50_ms']:.2f} p95 "
                  f"{row['postings_p95_ms']:.2f} ms | FTS5 alone p50 {row['fts5_alone_p50_ms']:.2f} | bare p50 "
                  f"{row['bare_p50_ms']:.2f} p95 {row['bare_p95_ms']:.2f} | equal {row['answers_equal_to_fts5_alone']}",
                  file=sys.stderr)
        await bare.close()
        # appends: the index log lists every row indexed while words have postings
        texts = next(generate(CorpusSpec(messages=appends, sessions=1, seed=11)))[1]
        bare_w = sqlite3.connect(bare_copy, isolation_level=None)
        spent = {"log_on": 0.0, "log_off": 0.0, "bare": 0.0}
        for n, start in enumerate(range(0, len(texts), 100)):
            chunk = texts[start:start + 100]
            mode = "log_on" if n % 2 == 0 else "log_off"
            await store.execute_write("UPDATE meta SET value = ? WHERE key = 'index_log'", (int(mode == "log_on"),))
            events = events_for(900_000 + n, chunk)
            t = time.perf_counter()
            await engine.append(AppendParams(sessionKey=f"agent:main:appends:{n}", events=events, sessionId=f"a{n}"))
            spent[mode] += time.perf_counter() - t
            t = time.perf_counter()
            bare_w.execute("BEGIN")
            bare_w.executemany("INSERT INTO f (text, ts) VALUES (?, ?)",
                               [(e["message"]["content"], e["message"]["timestamp"]) for e in events])
            bare_w.execute("COMMIT")
            spent["bare"] += time.perf_counter() - t
        bare_w.close()
        half = len(texts) / 2
        out["append_batch100_msgs_per_s"] = {"log_on": half / spent["log_on"], "log_off": half / spent["log_off"],
                                             "bare": len(texts) / spent["bare"]}
        rates = out["append_batch100_msgs_per_s"]
        print(f"appends after optimize, batches of 100: index log on {rates['log_on']:,.0f} msg/s, off "
              f"{rates['log_off']:,.0f}, bare {rates['bare']:,.0f}", file=sys.stderr)
    shutil.rmtree(copy, ignore_errors=True)
    bare_copy.unlink()
    return out


async def _bare_range(bare_path: Path, key: str, data_dir: Path) -> tuple[int, int]:
    """The bare table's rowids of that session: the same messages, inserted in the same order."""
    session = int(key.rsplit(":", 1)[1])
    spec_offsets = json.loads((data_dir.parent / "offsets.json").read_text())
    return spec_offsets[session][0] + 1, spec_offsets[session][1]


def write_offsets(spec: CorpusSpec, work: Path) -> None:
    offsets, n = [], 0
    for _, texts in generate(spec):
        offsets.append((n, n + len(texts)))
        n += len(texts)
    (work / "offsets.json").write_text(json.dumps(offsets))


def rss_parts() -> dict[str, float]:
    """Resident memory now, split: the process's own (anonymous) and mapped file pages (with
    search.readerMmapMb the readers map the database: those pages are the OS page cache)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("RssAnon", "RssFile"):
            fields[f"rss_{name[3:].lower()}_mb"] = int(value.split()[0]) / 1024
    return fields


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--single-tx", type=int, default=5_000)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--out", default=str(HERE / "results" / "search.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    spec = CorpusSpec(messages=args.messages, sessions=args.sessions)
    work = HERE / "work" / f"search-{args.messages}"
    marker = work / "build.json"
    if args.rebuild or not marker.exists():
        print(f"building {args.messages:,} messages in {args.sessions:,} sessions …", file=sys.stderr)
        built = await build(spec, work)
        write_offsets(spec, work)
        marker.write_text(json.dumps(built))
    built = json.loads(marker.read_text())
    print(f"append+index, batches of 100: ours {built['ours_batch100_msgs_per_s']:,.0f} msg/s, bare insert "
          f"{built['bare_batch100_msgs_per_s']:,.0f} msg/s", file=sys.stderr)
    single = await single_tx_rates(work, args.single_tx)
    print(f"one message per transaction: ours {single['ours_single_tx_msgs_per_s']:,.0f} msg/s, bare "
          f"{single['bare_single_tx_msgs_per_s']:,.0f} msg/s", file=sys.stderr)
    load_before = os.getloadavg()[0]
    queries = await measure(work, args.reps, built["messages"])
    load_after = os.getloadavg()[0]
    postings = await postings_phase(work, pick_words(work / "bare.db", built["messages"]), args.reps)
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "cpus": os.cpu_count()},
        "code": commit(), "queries_load_avg_1m": [round(load_before, 2), round(load_after, 2)],
        "corpus": {"messages": built["messages"], "sessions": args.sessions},
        "build": built, "single_tx": single, "queries": queries, "postings": postings,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **rss_parts(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"peak RSS {report['peak_rss_mb']:.0f} MB (at the end: {report['rss_anon_mb']:.0f} MB anonymous, "
          f"{report['rss_file_mb']:.0f} MB of mapped files); figures in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
