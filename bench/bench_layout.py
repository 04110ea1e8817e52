"""How the row-id layout changes FTS5 itself: the same texts under several layouts, bare statements.

    .venv/bin/python bench/bench_layout.py [--reps 15]   (after bench/bench_search.py built its data)

Index rows take the id of the transcript row they index, and that id carries the window. FTS5
stores doclists as varint deltas of ids, so the layout decides how many bytes a word pays per
window it occurs in. This loads the benchmark corpus (from the bare table, in the order the
benchmark appended it) into one plain FTS5 table per layout and times the same bare statement
(`MATCH … ORDER BY bm25 LIMIT 26`) on each, interleaved, through aiosqlite with the database
mapped (as a quiet reader) and with SQLite's defaults:

- dense: 1, 2, 3, … (what a bare table gets);
- shift31: `wid << 31 | seq << 1 | role`, the layout of schema version 5;
- low13, low17, low20: `wid << S | seq << 1 | role` for seqs below 2^(S-1), the rest of a window
  at `2^62 | wid << 31 | seq << 1 | role` (rowids.py uses one of these).

A search scoped to one window ranks its low and high ranges with one sorter each (two FTS5
cursors, each counting the word's documents for BM25's IDF when it has rows): the scoped classes
take the largest session (20,804 messages, past every low region but low20's) and a median one.
Index sizes and the statements' p50 go to bench/results/layout.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import aiosqlite

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import built_data, pick_words  # noqa: E402

from sessionsearch.store.sqlite.fts import quote  # noqa: E402

HERE = Path(__file__).resolve().parent
HIGH = 1 << 62
LAYOUTS = {"dense": None, "shift31": 31, "low13": 13, "low17": 17, "low20": 20}
SQL = "SELECT rowid, bm25(f) FROM f WHERE f MATCH :m{cond} ORDER BY bm25(f) LIMIT 26"


def row_id(shift: int, wid: int, seq: int, bit: int) -> int:
    if shift == 31 or seq < 1 << (shift - 1):
        return (wid << shift) | (seq << 1) | bit
    return HIGH | (wid << 31) | (seq << 1) | bit


def ranges(shift: int | None, wid: int, first: int, last: int) -> list[tuple[int, int]]:
    """Id ranges of one window's rows (dense: the bare table's own rowids first..last); the high
    range only when the window reaches it (the store knows which windows do)."""
    if shift is None:
        return [(first, last)]
    if shift == 31:
        return [(wid << 31, (wid << 31) | ((1 << 31) - 1))]
    low = [(wid << shift, (wid << shift) | ((1 << shift) - 1))]
    if last - first + 1 < 1 << (shift - 1):
        return low
    return low + [(HIGH | (wid << 31) | (1 << shift), HIGH | (wid << 31) | ((1 << 31) - 1))]


def build(work: Path, dest: Path, offsets: list[tuple[int, int]]) -> dict[str, dict]:
    dest.mkdir(exist_ok=True)
    src = sqlite3.connect(work / "bare.db")
    texts = [r[0] for r in src.execute("SELECT text FROM f ORDER BY rowid")]
    src.close()
    out = {}
    for name, shift in LAYOUTS.items():
        path = dest / f"{name}.db"
        if not path.exists():
            t = time.perf_counter()
            conn = sqlite3.connect(path.with_suffix(".tmp"), isolation_level=None)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("CREATE VIRTUAL TABLE f USING fts5(text, tokenize = 'unicode61 remove_diacritics 2')")
            conn.execute("BEGIN")
            for session, (lo, hi) in enumerate(offsets):
                wid = session + 1
                conn.executemany("INSERT INTO f (rowid, text) VALUES (?, ?)", (
                    (n + 1 if shift is None else row_id(shift, wid, n - lo + 1, (n - lo) % 2), texts[n])
                    for n in range(lo, hi)))
                if session % 500 == 499:
                    conn.execute("COMMIT")
                    conn.execute("BEGIN")
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()
            path.with_suffix(".tmp").rename(path)
            print(f"  built {name} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        conn = sqlite3.connect(path)
        (size,), = conn.execute("SELECT sum(length(block)) FROM f_data").fetchall()
        conn.close()
        out[name] = {"index_mb": round(size / 1e6, 1)}
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--out", default=str(HERE / "results" / "layout.json"))
    args = parser.parse_args()
    work = built_data(args.messages)
    offsets = json.loads((work / "offsets.json").read_text())
    sizes = build(work, work / "layouts", offsets)
    words = pick_words(work / "bare.db", args.messages)
    by_length = sorted(range(len(offsets)), key=lambda s: offsets[s][1] - offsets[s][0])
    scoped = {"largest_session": by_length[-1], "median_session": by_length[len(by_length) // 2]}
    classes: dict[str, list[tuple[str, object]]] = {}  # name -> [(match, session or None)]
    for name in ("rare", "mid_0.3pct", "common_1pct", "common_10pct"):
        classes[name] = [(quote(w), None) for w in words[name]]
    classes["two_words"] = [(f"{quote(a)} AND {quote(b)}", None)
                            for a, b in zip(words["common_1pct"], words["common_10pct"])]
    classes["prefix"] = [(f"{quote(w[:4])} *", None) for w in words["mid_0.3pct"]]
    for name, session in scoped.items():
        classes[name] = [(quote(w), session) for w in words["common_10pct"]]

    conns = {}
    for name in LAYOUTS:
        for mapped in (True, False):
            conn = await aiosqlite.connect(work / "layouts" / f"{name}.db")
            if mapped:
                await conn.execute("PRAGMA mmap_size = 2147418112")
            conns[name, mapped] = conn

    async def run(conn, layout: str, match: str, session) -> int:
        if session is None:
            return len(await conn.execute_fetchall(SQL.format(cond=""), {"m": match}))
        lo, hi = offsets[session]
        params: dict[str, object] = {"m": match}
        sorters = []  # one statement, one sorter per range, as the store ranks a scope
        for i, (a, b) in enumerate(ranges(LAYOUTS[layout], session + 1, lo + 1, hi)):
            sorters.append(f"SELECT * FROM ({SQL.format(cond=f' AND rowid BETWEEN :a{i} AND :b{i}')})")
            params.update({f"a{i}": a, f"b{i}": b})
        return len((await conn.execute_fetchall(" UNION ALL ".join(sorters), params))[:26])

    results: dict[str, dict] = {}
    for cls, items in classes.items():
        times = {key: [] for key in conns}
        counts = {}
        for key, conn in conns.items():  # warm, and check every layout finds as many rows
            counts[key] = [await run(conn, key[0], m, s) for m, s in items]
        assert len({tuple(c) for c in counts.values()}) == 1, (cls, counts)
        for _ in range(args.reps):
            for match, session in items:
                for key, conn in conns.items():
                    t = time.perf_counter()
                    await run(conn, key[0], match, session)
                    times[key].append(time.perf_counter() - t)
        row = {}
        for mapped in (True, False):
            dense = statistics.median(times["dense", mapped])
            for layout in LAYOUTS:
                p50 = statistics.median(times[layout, mapped])
                row[f"{layout}{'' if mapped else '_unmapped'}"] = {
                    "p50_ms": round(p50 * 1000, 3), "to_dense": round(p50 / dense, 3)}
        results[cls] = row
        print(f"{cls:>16}  " + "  ".join(
            f"{layout} {row[layout]['p50_ms']:.2f} ms {row[layout]['to_dense']:.2f}x" for layout in LAYOUTS))
    for conn in conns.values():
        await conn.close()
    out = {"index_sizes": sizes, "scoped_sessions": {k: offsets[v][1] - offsets[v][0] for k, v in scoped.items()},
           "reps": args.reps, "classes": results}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(sizes))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
