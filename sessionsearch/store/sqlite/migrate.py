"""Applying the numbered migrations of an agent database (migrations.py), each in its own
transaction and recorded in `schema_migrations`, and reading which are applied."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from .migrations import MIGRATIONS

LATEST = MIGRATIONS[-1][0]


def migrate(c: sqlite3.Connection, tx: Callable[[], AbstractContextManager[sqlite3.Connection]]) -> None:
    """Apply the migrations the database has not recorded yet, each in a transaction of `tx`."""
    c.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
              "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)")
    for version, name, script in MIGRATIONS:
        with tx() as c:
            if c.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (version,)).fetchone():
                continue
            for statement in _statements(script):
                c.execute(statement)
            c.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (version, name, int(time.time() * 1000)))


def applied_migrations(c: sqlite3.Connection) -> list[tuple[int, str]]:
    return [tuple(r) for r in c.execute("SELECT version, name FROM schema_migrations ORDER BY version")]


def applied_version(path: Path) -> int:
    """The highest migration recorded in a database (0: none yet), read with a read-only connection."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            version: int = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]
            return version
        finally:
            conn.close()
    except sqlite3.Error:  # no migrations table yet (or not a database this version can read)
        return 0


def _statements(script: str) -> list[str]:
    out, buf = [], []
    for line in script.splitlines():
        if line.strip().startswith("--"):
            continue
        buf.append(line)
        joined = "\n".join(buf)
        if joined.rstrip().endswith(";") and sqlite3.complete_statement(joined):
            out.append(joined.strip())
            buf = []
    if "\n".join(buf).strip():
        out.append("\n".join(buf).strip())
    return out
