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

The turnstile's file is opened for each transaction and closed after (a flock goes with its last
descriptor): an open agent store holds one file fewer (limits.py), for an open and a close a
transaction, a few microseconds.
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
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644))  # made, and openable, before any write

    def begin(self, conn: sqlite3.Connection, timeout_ms: int) -> float:
        """`BEGIN IMMEDIATE` on `conn` in turn; returns the seconds it waited. Raises SQLite's
        "database is locked" once `timeout_ms` passed."""
        started = time.monotonic()
        deadline = started + timeout_ms / 1000
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held by a waiter only: bounded by its timeout
        except BaseException:
            os.close(fd)
            raise
        try:
            conn.execute("PRAGMA busy_timeout = 0")  # the waiting is done here, not in SQLite's sleeps
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
            os.close(fd)  # lets the turnstile go
