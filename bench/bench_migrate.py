"""Upgrading a store written before schema version 6 (row ids `wid << 31 | seq << 1 | role`).

    .venv/bin/python bench/bench_migrate.py   (after bench/bench_search.py built its data)

Copies the benchmark's 1,000,000-message store, rewrites its ids into the old layout (as a store
of schema version 5 holds them) and opens it with the engine, which applies migration 6: every
transcript and index row copied under its new id. Reports the time the open took, the FTS5 index
size before and after, and the file size (the copy leaves the old pages free for reuse). Figures go
to bench/results/migrate.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import sys
import time
from pathlib import Path

from sessionsearch.protocol import SearchParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import built_data  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.store.rowids import HIGH, LOW_BITS, SEQ_BITS  # noqa: E402

HERE = Path(__file__).resolve().parent


def old_id(col: str) -> str:
    return (f"(CASE WHEN {col} >= {HIGH} THEN {col} - {HIGH} "
            f"ELSE (({col} >> {LOW_BITS}) << {SEQ_BITS + 1}) | ({col} & {(1 << LOW_BITS) - 1}) END)")


def to_schema_5(db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    columns = "wid, event_id, parent_seq, node_seq, type, role, ts, on_branch, text, body"
    conn.execute("BEGIN")
    conn.execute("CREATE TABLE events_old (id INTEGER PRIMARY KEY, wid INTEGER NOT NULL, event_id TEXT, "
                 "parent_seq INTEGER, node_seq INTEGER, type TEXT NOT NULL, role TEXT, ts INTEGER NOT NULL, "
                 "on_branch INTEGER NOT NULL DEFAULT 0, text TEXT, body TEXT NOT NULL)")
    conn.execute(f"INSERT INTO events_old SELECT {old_id('id')}, {columns} FROM events ORDER BY 1")
    conn.execute("DROP TABLE events")
    conn.execute("ALTER TABLE events_old RENAME TO events")
    conn.execute("CREATE INDEX events_by_event_id ON events (wid, event_id) WHERE event_id IS NOT NULL")
    conn.execute("CREATE VIRTUAL TABLE msg_old USING fts5 (text, ts UNINDEXED, mid UNINDEXED, "
                 "tokenize = 'unicode61 remove_diacritics 2')")
    conn.execute(f"INSERT INTO msg_old (rowid, text, ts, mid) SELECT {old_id('rowid')}, text, ts, mid "
                 "FROM msg_fts ORDER BY 1")
    conn.execute("DROP TABLE msg_fts")
    conn.execute("ALTER TABLE msg_old RENAME TO msg_fts")
    conn.execute("DROP INDEX windows_long")
    conn.execute("DELETE FROM schema_migrations WHERE version >= 6")
    conn.execute("COMMIT")
    conn.execute("VACUUM")
    conn.close()


def index_mb(db: Path) -> float:
    conn = sqlite3.connect(db)
    (size,), = conn.execute("SELECT sum(length(block)) FROM msg_fts_data").fetchall()
    conn.close()
    return round(size / 1e6, 1)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--out", default=str(HERE / "results" / "migrate.json"))
    args = parser.parse_args()
    sslogging.configure("WARNING")
    work = built_data(args.messages)
    data = work / "migrate"
    shutil.rmtree(data, ignore_errors=True)
    (data / "agents").mkdir(parents=True)
    db = data / "agents" / "main.db"
    src = sqlite3.connect(work / "data" / "agents" / "main.db")
    dst = sqlite3.connect(db)
    src.backup(dst)
    src.close()
    dst.close()
    t = time.perf_counter()
    to_schema_5(db)
    print(f"rewrote the copy with the old ids in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    before = {"index_mb": index_mb(db), "file_mb": round(db.stat().st_size / 1e6, 1)}
    t = time.perf_counter()
    async with Engine(data, settings=Settings(data_dir=str(data))) as engine:
        await engine.store("main")  # opening the store applies the migration
        opened = time.perf_counter() - t
        hits = (await engine.search(SearchParams.of({"query": "kata", "limit": 5})))["results"]
    after = {"index_mb": index_mb(db), "file_mb": round(db.stat().st_size / 1e6, 1)}
    out = {"messages": args.messages, "migration_s": round(opened, 1), "before": before, "after": after,
           "search_after_migration_hits": len(hits)}
    print(json.dumps(out, indent=2))
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    shutil.rmtree(data)


if __name__ == "__main__":
    asyncio.run(main())
