"""What an FTS5 prefix index would do for short prefixes, on bench_search.py's bare table.

    .venv/bin/python bench/bench_prefix_index.py [--messages 200000]

Copies the bare FTS5 table's texts into two scratch tables, without and with `prefix='2 3 4'`,
timing each build and its size, then per prefix: the walk of its matches (`count(*)`) and the
bm25 ranking of all of them (`ORDER BY bm25 LIMIT 26`). Figures go to
bench/results/prefix_index.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import built_data  # noqa: E402

HERE = Path(__file__).resolve().parent
PREFIXES = ("ka", "kata", "ul", "tast")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "results" / "prefix_index.json"))
    args = parser.parse_args()
    work = built_data(args.messages)
    out: dict = {"messages": args.messages}
    for name, option in (("plain", ""), ("prefix_2_3_4", ", prefix='2 3 4'")):
        path = work / f"prefix-{name}.db"
        path.unlink(missing_ok=True)
        conn = sqlite3.connect(path)
        conn.execute(f"CREATE VIRTUAL TABLE f USING fts5(text, ts UNINDEXED, "
                     f"tokenize='unicode61 remove_diacritics 2'{option})")
        conn.execute("ATTACH ? AS src", (str(work / "bare.db"),))
        started = time.perf_counter()
        conn.execute("INSERT INTO f (rowid, text, ts) SELECT rowid, text, ts FROM src.f")
        conn.commit()
        row: dict = {"build_s": time.perf_counter() - started, "size_mb": os.path.getsize(path) / 2**20}
        conn.execute("DETACH src")
        (total,) = conn.execute("SELECT count(*) FROM f_docsize").fetchone()
        for prefix in PREFIXES:
            match = f'"{prefix}" *'
            for label, sql in (("walk", "SELECT count(*) FROM f WHERE f MATCH ?"),
                               ("rank", "SELECT rowid, bm25(f) FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT 26")):
                times = []
                for _ in range(args.reps):
                    t = time.perf_counter()
                    result = conn.execute(sql, (match,)).fetchall()
                    times.append(time.perf_counter() - t)
                    if label == "walk":
                        row[f"{prefix}_share"] = result[0][0] / total
                row[f"{prefix}_{label}_ms"] = statistics.median(times) * 1000
        conn.close()
        path.unlink()
        out[name] = row
        print(name, {k: round(v, 3) for k, v in row.items()}, file=sys.stderr)
    Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
