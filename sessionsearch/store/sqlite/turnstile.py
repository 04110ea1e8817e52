"""Taking turns at an agent database's write lock, between processes.

SQLite's write lock is not a queue. A process that finds it taken sleeps and retries (the busy
handler backs off to 100 ms sleeps), and a process that commits and begins again at once takes it
back before the sleeper wakes. A worker draining a backlog runs its transactions back to back, so
a gateway append in the web process waited seconds for a gap. Here a writer
takes a turnstile (an exclusive flock on a file beside the database) before `BEGIN IMMEDIATE` and
lets it go once the transaction has begun: a writer waiting for the lock holds the turnstile
meanwhile, so the one that just committed queues behind it instead of starting again. The waiter
polls every half millisecond instead of sleeping through SQLite's backoff, so the lock does not
sit idle after the commit it waited for either.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from pathlib import Path

POLL_S = 0.0005


class Turnstile:
    def __init__(self, db_path: Path) -> None:
        self.path = Path(f"{db_path}-turn")
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def begin(self, conn: sqlite3.Connection, timeout_ms: int) -> float:
        """`BEGIN IMMEDIATE` on `conn` in turn; returns the seconds it waited. Raises SQLite's
        "database is locked" once `timeout_ms` passed."""
        started = time.monotonic()
        deadline = started + timeout_ms / 1000
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # held by a waiter only: bounded by its timeout
        conn.execute("PRAGMA busy_timeout = 0")  # the waiting is done here, not in SQLite's sleeps
        try:
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return time.monotonic() - started
                except sqlite3.OperationalError as exc:
                    if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                        raise
                time.sleep(POLL_S)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {timeout_ms}")
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self._fd)
