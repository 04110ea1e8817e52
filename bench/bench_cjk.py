"""Indexed CJK benchmark: one- and two-character CJK queries next to Latin words of the same
frequency, bare FTS5 and a trigram table beside it, and what the shadow tokens cost.

    .venv/bin/python bench/bench_cjk.py [--messages 200000] [--reps 20]

Builds one engine with two agents holding the same corpus (5% CJK messages, bench/corpus.py):
`main` indexes the shadow tokens (text/cjk.py), `plain` indexes the text as it stands (index_text
replaced by the identity on its writer thread only), appended alternately in batches of 100, so the
append rates and database sizes compare like for like. Beside them a bare SQLite file holds the
same texts in an FTS5 table (unicode61) and a trigram one. Then, interleaved query by query on
`main`: CJK unigrams and bigrams at a few document frequencies, each next to the Latin word whose
frequency is nearest, through the Python API (wall time, and the process's CPU time, which the
machine's other load does not inflate); bare FTS5 for the Latin word, the trigram table for
the CJK string (LIKE, as it must for fewer than three characters); and each query once more
with the store's postings out of use for that search (`*_fts5`: FTS5 ranks every row, as before
the postings, side by side). Last, on a copy of `main`
rewritten to the layout before migration 9: how long the migration takes on open, and the
reconciliation of the windows it hands over. Figures go to bench/results/cjk.json (--out).

Before the queries, `optimize` builds the postings of `main` as the workers do once an import
drains (store/sqlite/postings.py: every word, Latin or CJK shadow token, in at least
search.postingsMinDocs rows), timed, with their size (`postings`); --no-postings measures
without them, FTS5 ranking every query.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import threading
import time
from pathlib import Path

from sessionsearch.protocol import AppendParams, SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import events_for  # noqa: E402
from corpus import CorpusSpec, generate  # noqa: E402
from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.store.sqlite import postings as hot  # noqa: E402
from sessionsearch.store.sqlite import writer as writer_module  # noqa: E402
from sessionsearch.store.sqlite.fts import quote  # noqa: E402
from sessionsearch.text import cjk  # noqa: E402

HERE = Path(__file__).resolve().parent
BARE_SQL = "SELECT rowid, bm25(f) FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT 26"
# the trigram index answers three characters or more; for fewer, FTS5 3.40's LIKE on it returns no
# rows at all, so a scan of its text is what a user is left with
SCAN_SQL = "SELECT rowid FROM tri WHERE instr(text, ?) > 0 LIMIT 26"
TRIGRAM_MATCH_SQL = "SELECT rowid, bm25(tri) FROM tri WHERE tri MATCH ? ORDER BY bm25(tri) LIMIT 26"
SHARES = {"le_0.03pct": 0.0003, "0.1pct": 0.001, "0.3pct": 0.003, "1pct": 0.01}


def plain_on_its_thread() -> None:
    """Agent `plain` indexes text as it stands: index_text is the identity on its writer thread."""
    real = cjk.index_text

    def index_text(text: str) -> str:
        return text if threading.current_thread().name.startswith("sessionsearch-writer-plain") else real(text)
    writer_module.index_text = index_text


def db_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = conn.execute("SELECT page_count * page_size FROM pragma_page_count, pragma_page_size").fetchone()[0]
    conn.close()
    return size


def fts_bytes(path: Path) -> int:
    """Bytes of the full-text index's tables (content, index, sizes), by dbstat."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'msg_fts%'").fetchone()[0]
    except sqlite3.OperationalError:
        return -1
    finally:
        conn.close()


async def build(spec: CorpusSpec, work: Path) -> dict:
    data_dir = work / "data"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    bare = sqlite3.connect(work / "bare.db", isolation_level=None)
    bare.execute("PRAGMA journal_mode = WAL")
    bare.execute("PRAGMA synchronous = NORMAL")
    bare.execute("CREATE VIRTUAL TABLE f USING fts5(text, tokenize = 'unicode61 remove_diacritics 2')")
    bare.execute("CREATE VIRTUAL TABLE tri USING fts5(text, tokenize = 'trigram')")
    spent = {"main": 0.0, "plain": 0.0, "bare": 0.0, "trigram": 0.0}
    n = cjk_rows = 0
    plain_on_its_thread()
    async with Engine(data_dir, settings=Settings(data_dir=str(data_dir))) as engine:
        for session, texts in generate(spec):
            for start in range(0, len(texts), 100):
                chunk = texts[start:start + 100]
                events = events_for(session, chunk, start)
                order = ("main", "plain") if (session + start) % 2 == 0 else ("plain", "main")
                for agent in order:
                    t = time.perf_counter()
                    await engine.append(AppendParams(sessionKey=f"agent:{agent}:bench:{session}", events=events, sessionId=f"{agent}-{session}"))
                    spent[agent] += time.perf_counter() - t
                for table in ("f", "tri"):
                    t = time.perf_counter()
                    bare.execute("BEGIN")
                    bare.executemany(f"INSERT INTO {table} (text) VALUES (?)", [(text,) for _, text in chunk])
                    bare.execute("COMMIT")
                    spent["bare" if table == "f" else "trigram"] += time.perf_counter() - t
                n += len(chunk)
                cjk_rows += sum(cjk.needs_fold(text) for _, text in chunk)
            if session % 2000 == 0:
                print(f"  built {n:,} messages", file=sys.stderr)
    bare.close()
    agents = data_dir / "agents"
    out = {"messages": n, "cjk_messages": cjk_rows,
           **{f"{k}_batch100_msgs_per_s": n / v for k, v in spent.items()},
           "db_bytes_main": db_bytes(agents / "main.db"), "db_bytes_plain": db_bytes(agents / "plain.db"),
           "fts_bytes_main": fts_bytes(agents / "main.db"), "fts_bytes_plain": fts_bytes(agents / "plain.db"),
           "bare_db_bytes_unicode61_and_trigram": db_bytes(work / "bare.db")}
    out["append_rate_shadow_vs_plain"] = out["main_batch100_msgs_per_s"] / out["plain_batch100_msgs_per_s"]
    out["db_size_shadow_vs_plain"] = out["db_bytes_main"] / out["db_bytes_plain"]
    out["fts_size_shadow_vs_plain"] = out["fts_bytes_main"] / out["fts_bytes_plain"]
    (work / "build.json").write_text(json.dumps(out, indent=2))
    return out


def pick(db: Path, total: int) -> dict[str, list[tuple[str, str, int, int]]]:
    """Per frequency class: (CJK query, Latin word, CJK docs, Latin docs), unigrams and bigrams
    nearest the class's share, each paired with the Latin word of the nearest document frequency."""
    conn = sqlite3.connect(db)
    conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, msg_fts, 'row')")
    terms = conn.execute("SELECT term, doc FROM temp.v").fetchall()
    conn.close()
    latin = sorted((d, t) for t, d in terms if t.isascii() and t.isalpha())
    uni = [(t, d) for t, d in terms if len(t) == 1 and cjk.runs(t) == [t]]
    bi = [(t, d) for t, d in terms if len(t) == 2 and cjk.runs(t) == [t]]
    out: dict[str, list] = {}
    for kind, pool in (("one_char", uni), ("two_chars", bi)):
        for name, share in SHARES.items():
            ranked = sorted(pool, key=lambda r: abs(r[1] / total - share))[:4]
            if not ranked or not share / 2 <= ranked[0][1] / total <= share * 2:  # nothing near this share
                continue
            pairs = []
            for term, docs in ranked:
                ldocs, word = min(latin, key=lambda r: abs(r[0] - docs))
                pairs.append((term, word, docs, ldocs))
            out[f"{kind}_{name}"] = pairs
    return out


def postings_bytes(path: Path) -> dict[str, int]:
    """Bytes of the words' postings tables and the prefixes' (dbstat), by table."""
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute(
            "SELECT name, sum(pgsize) FROM dbstat WHERE name IN ('hot_words', 'hot_postings', "
            "'sqlite_autoindex_hot_words_1', 'sqlite_autoindex_hot_words_2', 'prefix_words', "
            "'prefix_postings') GROUP BY name").fetchall())
    finally:
        conn.close()


async def build_postings(work: Path) -> dict:
    """`optimize` of agent `main` (every word from scratch, then the prefixes), timed."""
    data_dir = work / "data"
    db = data_dir / "agents" / "main.db"
    async with Engine(data_dir, settings=Settings(data_dir=str(data_dir))) as engine:
        await engine.search(SearchParams.of({"query": "x", "agentId": "main"}))  # the store opened
        t, cpu = time.perf_counter(), time.process_time()
        done = (await engine.optimize("main"))["agents"]["main"]
        wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    words = done["words"]
    cjk_words = [w for w in words if not w.isascii()]
    out = {"min_docs": hot.MIN_DOCS, "min_share": hot.MIN_SHARE, "seconds": wall, "cpu_seconds": cpu,
           "words_seconds": sum(w["seconds"] for w in words.values()), "words": len(words),
           "cjk_words": len(cjk_words), "rows": sum(w["rows"] for w in words.values()),
           "cjk_rows": sum(words[w]["rows"] for w in cjk_words),
           "fewest_rows": min((w["rows"] for w in words.values()), default=0),
           "prefixes": done["prefixes"], "bytes": postings_bytes(db), "db_bytes_main": db_bytes(db)}
    print(f"postings: {out['words']} words ({out['cjk_words']} CJK), {out['rows']:,} rows, {wall:.1f} s "
          f"(cpu {cpu:.1f} s), {sum(out['bytes'].values()) / 1e6:.1f} MB", file=sys.stderr)
    return out


async def measure(work: Path, reps: int, total: int) -> dict:
    data_dir = work / "data"
    classes = pick(data_dir / "agents" / "main.db", total)
    bare = sqlite3.connect(work / "bare.db")
    results = {}
    async with Engine(data_dir, settings=Settings(data_dir=str(data_dir))) as engine:
        for pairs in classes.values():  # warm: the catalog, the readers, the pages
            for term, word, _, _ in pairs:
                for body in (term, word):
                    for _ in range(3):
                        await engine.search(SearchParams.of({"query": body, "agentId": "main", "limit": 25}))
        store = await engine.store("main")
        for name, pairs in classes.items():
            times: dict[str, list[float]] = {"cjk": [], "latin": [], "bare_latin": [], "scan_cjk": [],
                                             "cjk_cpu": [], "latin_cpu": [], "cjk_fts5": [], "latin_fts5": [],
                                             "cjk_fts5_cpu": [], "latin_fts5_cpu": []}
            for term, word, _, _ in pairs:  # warm
                await engine.search(SearchParams.of({"query": term, "agentId": "main", "limit": 25}))
                await engine.search(SearchParams.of({"query": word, "agentId": "main", "limit": 25}))
            for rep in range(reps):
                for term, word, _, _ in pairs:
                    runs = [("cjk", term), ("latin", word), ("cjk_fts5", term), ("latin_fts5", word)]
                    # the first search after the bare statements below pays for their cache traffic
                    # (~0.7 ms here): each kind goes first as often as each other
                    for key, body in runs[rep % 4:] + runs[:rep % 4]:
                        seen = store._hot_seen
                        if key.endswith("_fts5"):  # this one search without postings (FTS5 ranks every row)
                            store._hot_seen = (seen[0], frozenset())  # the same version: the list is not read again
                        t, cpu = time.perf_counter(), time.process_time()
                        await engine.search(SearchParams.of({"query": body, "agentId": "main", "limit": 25}))
                        times[key].append(time.perf_counter() - t)
                        times[f"{key}_cpu"].append(time.process_time() - cpu)  # all threads: load-proof
                        store._hot_seen = seen
                    t = time.perf_counter()
                    bare.execute(BARE_SQL, (quote(word),)).fetchall()
                    times["bare_latin"].append(time.perf_counter() - t)
                    t = time.perf_counter()
                    bare.execute(SCAN_SQL, (term,)).fetchall()
                    times["scan_cjk"].append(time.perf_counter() - t)
            row = {"pairs": [{"cjk": t, "latin": w, "cjk_docs": d, "latin_docs": ld} for t, w, d, ld in pairs]}
            for key, values in times.items():
                row[f"{key}_p50_ms"] = statistics.median(values) * 1000
                row[f"{key}_p95_ms"] = pct(values, 0.95) * 1000
            row["cjk_vs_latin_p50"] = row["cjk_p50_ms"] / row["latin_p50_ms"]
            row["cjk_vs_latin_cpu_p50"] = row["cjk_cpu_p50_ms"] / row["latin_cpu_p50_ms"]
            results[name] = row
            print(f"{name:22s} cjk p50 {row['cjk_p50_ms']:6.2f} p95 {row['cjk_p95_ms']:6.2f} | latin p50 "
                  f"{row['latin_p50_ms']:6.2f} p95 {row['latin_p95_ms']:6.2f} | ratio {row['cjk_vs_latin_p50']:.2f}"
                  f" (cpu {row['cjk_cpu_p50_ms']:5.2f} / {row['latin_cpu_p50_ms']:5.2f} = {row['cjk_vs_latin_cpu_p50']:.2f})"
                  f" | bare latin {row['bare_latin_p50_ms']:6.2f} | bare scan {row['scan_cjk_p50_ms']:7.2f}"
                  f" | without postings: cjk p50 {row['cjk_fts5_p50_ms']:6.2f} p95 {row['cjk_fts5_p95_ms']:6.2f}"
                  f" (cpu {row['cjk_fts5_cpu_p50_ms']:5.2f}), latin p50 {row['latin_fts5_p50_ms']:6.2f}")
        # longer runs: phrases of bigrams on ours, the trigram index's own MATCH beside them
        longer = []
        texts = [r[0] for r in bare.execute("SELECT text FROM tri WHERE rowid % 997 = 0").fetchall()]
        for text in texts:
            runs = [r for r in cjk.runs(cjk.fold(text)) if len(r) >= 4]
            if runs:
                longer.append(runs[0][:4])
        longer = longer[:8]
        times = {"cjk": [], "trigram_match": []}
        for _ in range(reps):
            for term in longer:
                t = time.perf_counter()
                await engine.search(SearchParams.of({"query": term, "agentId": "main", "limit": 25}))
                times["cjk"].append(time.perf_counter() - t)
                t = time.perf_counter()
                bare.execute(TRIGRAM_MATCH_SQL, (quote(term),)).fetchall()
                times["trigram_match"].append(time.perf_counter() - t)
        if longer:
            results["four_chars"] = {"queries": longer, **{f"{k}_p50_ms": statistics.median(v) * 1000
                                                          for k, v in times.items()},
                                     **{f"{k}_p95_ms": pct(v, 0.95) * 1000 for k, v in times.items()}}
            print(f"four_chars             cjk p50 {results['four_chars']['cjk_p50_ms']:6.2f} | trigram MATCH "
                  f"{results['four_chars']['trigram_match_p50_ms']:6.2f}")
    bare.close()
    return results


def to_schema_8(db: Path) -> int:
    """Rewrite a store as the code before migration 9 wrote it (CJK rows indexed as they stand)."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.create_function("needs_fold", 1, cjk.needs_fold, deterministic=True)
    conn.execute("BEGIN")
    rows = conn.execute("SELECT e.id, e.text, e.ts, e.event_id FROM events e JOIN msg_fts f ON f.rowid = e.id "
                        "WHERE needs_fold(e.text)").fetchall()
    conn.executemany("DELETE FROM msg_fts WHERE rowid = ?", [(r[0],) for r in rows])
    conn.executemany("INSERT INTO msg_fts (rowid, text, ts, mid) VALUES (?, ?, ?, ?)", rows)
    conn.execute("DELETE FROM schema_migrations WHERE version >= 9")
    # what migrations 10-14 made goes too, so that opening the store applies 9-14 again
    for statement in ("DROP INDEX windows_by_span", "ALTER TABLE windows DROP COLUMN ts_min",
                      "DROP INDEX windows_by_ts_max", "ALTER TABLE windows DROP COLUMN ts_max",
                      "DROP TABLE prefix_words", "DROP TABLE prefix_postings", "DROP TABLE index_gone",
                      "DROP INDEX events_all_by_ts",
                      "CREATE INDEX events_by_ts ON events (ts) WHERE text IS NOT NULL"):
        conn.execute(statement)
    conn.execute("COMMIT")
    conn.close()
    return len(rows)


async def upgrade(work: Path) -> dict:
    """Migrations 9-13 on a copy of `main` in the old layout: time to open, then to reconcile."""
    up = work / "upgrade"
    shutil.rmtree(up, ignore_errors=True)
    (up / "agents").mkdir(parents=True)
    shutil.copy(work / "data" / "agents" / "main.db", up / "agents" / "main.db")
    rows = to_schema_8(up / "agents" / "main.db")
    t = time.perf_counter()
    async with Engine(up, settings=Settings(data_dir=str(up))) as engine:
        store = await engine.store("main")
        opened = time.perf_counter() - t
        async with store.reader() as reader:
            backlog = (await store.status(reader))["backlog"]
        first = await engine.search(SearchParams.of({"query": "東京", "agentId": "main"}))
        t = time.perf_counter()
        await engine.reconcile_pending()
        reconciled = time.perf_counter() - t
    shutil.rmtree(up, ignore_errors=True)
    return {"cjk_rows": rows, "open_with_migration_s": opened, "windows_handed_over": backlog,
            "first_search_indexing": bool(first.get("indexing")), "reconcile_s": reconciled}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--reuse", action="store_true", help="measure the data built by an earlier run")
    ap.add_argument("--no-postings", action="store_true", help="measure without building postings first")
    ap.add_argument("--out", default="cjk.json", help="file name under bench/results")
    ap.add_argument("--no-upgrade", action="store_true", help="skip the upgrade of the old layout")
    args = ap.parse_args()
    sslogging.configure("WARNING")
    spec = CorpusSpec(messages=args.messages, sessions=max(10, args.messages // 100), cjk_share=0.05)
    work = HERE / "work" / f"cjk-{args.messages}"
    if args.reuse and (work / "build.json").exists():
        built = json.loads((work / "build.json").read_text())
    else:
        built = await build(spec, work)
    print(json.dumps(built, indent=2))
    postings = None if args.no_postings else await build_postings(work)
    load = {"before_queries": os.getloadavg()}
    results = await measure(work, args.reps, built["messages"])
    load["after_queries"] = os.getloadavg()
    upgraded = None if args.no_upgrade else await upgrade(work)
    print(json.dumps(upgraded, indent=2))
    out = {"machine": {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "cpus": os.cpu_count()},
           "spec": {"messages": args.messages, "cjk_share": spec.cjk_share, "reps": args.reps},
           "build": built, "postings": postings, "queries": results, "upgrade": upgraded,
           "load_average": load}
    path = HERE / "results" / args.out
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
