"""Exact BM25 top hits for common words from impact-ordered postings: the prototype, next to FTS5.

The design as first measured, before it went into the search path (store/sqlite/postings.py, measured
there by bench_search.py after `optimize`); kept for what that benchmark does not vary: words in
30% of rows, and 1,000 or 10,000 rows indexed since the postings were built.

    .venv/bin/python bench/bench_topk.py [--data bench/work/search-1000000/data/agents/main.db]

Uses the store bench_search.py builds (run it first), on a copy. A word in 10% of 1,000,000
messages costs FTS5 ~80-150 ms for `ORDER BY bm25 LIMIT 26`, because bm25() reads the length of
every matching row. For a one-word query BM25 depends on a row only through its term frequency tf
and its length dl (the word's IDF is a positive factor common to all rows), and at a fixed tf it
falls as dl grows. So postings kept in a table ordered by (term, tf, dl, newest first, message id)
are, within one tf value, already in the exact order a search returns; a merge of the few tf runs
by score yields hits best first and stops once the k-th is certain. FTS5 then scores just those
rows (`+rowid IN (...)`), which gives the exact bm25 values and drops rows no longer indexed.

Postings are built for words above a document-frequency share from FTS5's own index (fts5vocab
'instance' for tf, the docsize table for dl). Rows indexed after the build ("fresh" rows, which the
product would list in the transaction that indexes them) are scored by FTS5 in the same statement:
measured with 0, 1,000 and 10,000 fresh rows. Every answer is checked against FTS5's complete
ordering (bm25, then newest, then message id). Figures go to bench/results/topk.json.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from stats import pct  # noqa: E402

sys.path.insert(0, str(HERE.parent))
from sessionsearch.store.rowids import wid_of, wid_sql  # noqa: E402
from sessionsearch.store.sqlite.postings import K1, B, average_length, varint_sum  # noqa: E402

EPS = 1e-9  # relative: far above the rounding difference between this score and FTS5's
K = 26  # a search's limit of 25, plus one that says more matched


def averages(conn: sqlite3.Connection) -> float:
    """FTS5's average row length (all columns), from its averages record."""
    (blob,) = conn.execute("SELECT block FROM msg_fts_data WHERE id = 1").fetchone()
    return average_length(blob)


def build(conn: sqlite3.Connection, terms: list[str]) -> dict[str, float]:
    """Postings of `terms` from the FTS5 index; seconds per term."""
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.vi USING fts5vocab(main, msg_fts, 'instance')")
    conn.executescript("""
        CREATE TABLE IF NOT EXISTS proto_terms (term TEXT PRIMARY KEY, tfs TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS proto_postings (
            term TEXT, tf INTEGER, dl INTEGER, neg_ts INTEGER, mid TEXT, rid INTEGER,
            PRIMARY KEY (term, tf, dl, neg_ts, mid, rid)) WITHOUT ROWID;
    """)
    seconds = {}
    for term in terms:
        t = time.perf_counter()
        rows = conn.execute(
            "SELECT v.doc, count(*), d.sz, c.c1, c.c2 FROM temp.vi v JOIN msg_fts_docsize d ON d.id = v.doc "
            "JOIN msg_fts_content c ON c.id = v.doc WHERE v.term = ? GROUP BY v.doc", (term,)).fetchall()
        with conn:
            conn.execute("DELETE FROM proto_postings WHERE term = ?", (term,))
            conn.executemany("INSERT INTO proto_postings VALUES (?, ?, ?, ?, ?, ?)",
                             ((term, tf, varint_sum(sz), -ts, mid, rid) for rid, tf, sz, ts, mid in rows))
            tfs = sorted({r[1] for r in rows})
            conn.execute("INSERT OR REPLACE INTO proto_terms VALUES (?, ?)", (term, json.dumps(tfs)))
        seconds[term] = time.perf_counter() - t
    return seconds


def top_k(conn: sqlite3.Connection, term: str, k: int, fresh: list[int], accept=lambda rid: True) -> list[tuple]:
    """The exact top `k` rows (rid, bm25, ts, mid) for one word, best first, within `accept`."""
    avgdl = averages(conn)
    (tfs,) = conn.execute("SELECT tfs FROM proto_terms WHERE term = ?", (term,)).fetchone()
    match = '"' + term + '"'

    def score(tf: int, dl: int) -> float:
        return tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))

    runs = []
    heap: list[tuple] = []
    for n, tf in enumerate(json.loads(tfs)):
        cursor = conn.execute("SELECT dl, neg_ts, mid, rid FROM proto_postings WHERE term = ? AND tf = ? "
                              "ORDER BY dl, neg_ts, mid, rid", (term, tf))
        runs.append((tf, cursor))
        row = cursor.fetchone()
        if row:
            heapq.heappush(heap, (-score(tf, row[0]), row[1], row[2], row[3], n))
    taken: list[int] = []
    kth = None  # the score of the k-th row taken
    while True:
        while heap and (kth is None or -heap[0][0] >= kth * (1 - EPS)):
            neg, _, _, rid, n = heapq.heappop(heap)
            tf, cursor = runs[n]
            row = cursor.fetchone()
            if row:
                heapq.heappush(heap, (-score(tf, row[0]), row[1], row[2], row[3], n))
            if accept(rid):
                taken.append(rid)
                if len(taken) == k:
                    kth = -neg
        # every posting left scores below the k-th taken (or none is left): FTS5 scores what was
        # taken and the fresh rows in one walk of the word's doclist; rows no longer indexed, and
        # fresh rows without the word, do not come back
        scored = conn.execute(
            "SELECT rowid, bm25(msg_fts), ts, mid FROM msg_fts WHERE msg_fts MATCH ? "
            "AND +rowid IN (SELECT value FROM json_each(?))", (match, json.dumps(taken + fresh))).fetchall()
        kept = set(taken).intersection(r[0] for r in scored)
        if len(kept) >= k or not heap:
            break
        taken, kth = [rid for rid in taken if rid in kept], None
    hits = [h for h in scored if h[0] in kept or accept(h[0])]
    hits.sort(key=lambda h: (h[1], -h[2], h[3]))
    return hits[:k]


def exact(conn: sqlite3.Connection, term: str, k: int) -> list[int]:
    return [r[0] for r in conn.execute(
        "SELECT rowid FROM msg_fts WHERE msg_fts MATCH ? ORDER BY bm25(msg_fts), ts DESC, mid LIMIT ?",
        ('"' + term + '"', k))]


def bare(conn: sqlite3.Connection, term: str, k: int) -> list:
    return conn.execute("SELECT rowid, bm25(msg_fts) FROM msg_fts WHERE msg_fts MATCH ? ORDER BY bm25(msg_fts) "
                        "LIMIT ?", ('"' + term + '"', k)).fetchall()


def timed(fn, reps: int) -> tuple[float, float, list[float]]:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000, pct(times, 0.95) * 1000, times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(HERE / "work" / "search-1000000" / "data" / "agents" / "main.db"))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", default=str(HERE / "results" / "topk.json"))
    args = parser.parse_args()
    work = HERE / "work" / "topk"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    db = work / "main.db"
    src = sqlite3.connect(args.data)
    src.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    src.close()
    shutil.copy(args.data, db)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = WAL")
    (total,) = conn.execute("SELECT count(*) FROM msg_fts_docsize").fetchone()
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.vr USING fts5vocab(main, msg_fts, 'row')")
    vocab = conn.execute("SELECT term, doc FROM temp.vr WHERE term GLOB '[a-z]*'").fetchall()
    classes = {}
    for name, share in (("common_1pct", 0.01), ("common_10pct", 0.10), ("common_30pct", 0.30)):
        ranked = sorted(vocab, key=lambda r: abs(r[1] / total - share))
        classes[name] = [t for t, _ in ranked[:3]]
    terms = [t for ts in classes.values() for t in ts]
    build_s = build(conn, terms)
    postings_mb = conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'proto_%'").fetchone()[0] / 2**20 \
        if conn.execute("SELECT 1 FROM pragma_module_list WHERE name = 'dbstat'").fetchone() else None
    rids = [r[0] for r in conn.execute("SELECT id FROM msg_fts_docsize")]
    rng = random.Random(5)
    report: dict = {"messages": total, "classes": {}, "build_seconds": build_s, "postings_mb": postings_mb}
    checked = wrong = 0
    for name, words in classes.items():
        rows = []
        for word in words:
            df = next(d for t, d in vocab if t == word)
            truth = exact(conn, word, K)
            entry = {"word": word, "docs": df}
            entry["bare_p50_ms"], entry["bare_p95_ms"], _ = timed(lambda: bare(conn, word, K), args.reps)
            for n_fresh in (0, 1000, 10_000):
                fresh = rng.sample(rids, n_fresh)
                if n_fresh:  # as if indexed after the build: their postings are not there yet
                    with conn:
                        conn.execute("CREATE TEMP TABLE IF NOT EXISTS gone (rid INTEGER PRIMARY KEY)")
                        conn.execute("DELETE FROM gone")
                        conn.executemany("INSERT INTO gone VALUES (?)", ((r,) for r in fresh))
                        conn.execute("CREATE TABLE IF NOT EXISTS held AS SELECT * FROM proto_postings WHERE 0")
                        conn.execute("INSERT INTO held SELECT * FROM proto_postings WHERE term = ? "
                                     "AND rid IN (SELECT rid FROM gone)", (word,))
                        conn.execute("DELETE FROM proto_postings WHERE term = ? AND rid IN (SELECT rid FROM gone)",
                                     (word,))
                got = [h[0] for h in top_k(conn, word, K, fresh)]
                checked += 1
                wrong += got != truth
                p50, p95, _ = timed(lambda: top_k(conn, word, K, fresh), args.reps)
                entry[f"fresh_{n_fresh}"] = {"p50_ms": p50, "p95_ms": p95, "exact": got == truth}
                if n_fresh:
                    with conn:
                        conn.execute("INSERT INTO proto_postings SELECT * FROM held")
                        conn.execute("DELETE FROM held")
            # a scope that leaves out every other window: half the rows to skip in the merge
            scoped_truth = [r[0] for r in conn.execute(
                f"SELECT rowid FROM msg_fts WHERE msg_fts MATCH ? AND {wid_sql('rowid')} % 2 = 0 "
                "ORDER BY bm25(msg_fts), ts DESC, mid LIMIT ?", ('"' + word + '"', K))]
            got = [h[0] for h in top_k(conn, word, K, [], accept=lambda rid: wid_of(rid) % 2 == 0)]
            checked += 1
            wrong += got != scoped_truth
            p50, p95, _ = timed(lambda: top_k(conn, word, K, [], accept=lambda rid: wid_of(rid) % 2 == 0), args.reps)
            entry["half_the_windows"] = {"p50_ms": p50, "p95_ms": p95, "exact": got == scoped_truth}
            rows.append(entry)
            print(json.dumps(entry), file=sys.stderr)
        report["classes"][name] = rows
    report["answers_checked"], report["answers_wrong"] = checked, wrong
    report["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    Path(args.out).write_text(json.dumps(report, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    print(f"{checked} answers checked against FTS5's full ordering, {wrong} wrong; figures in {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
