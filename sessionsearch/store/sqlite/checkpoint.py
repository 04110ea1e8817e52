"""WAL checkpoints of one agent database, run beside the writer instead of inside its commits.

SQLite's automatic checkpoint runs in the commit that pushes the WAL past 1,000 pages, on the
writer's own thread, and with `synchronous = NORMAL` it ends in two fsyncs, a cost to every
append, import and reconciliation (docs/architecture/decisions.md). The writer turns it
off and calls `committed()` after each commit; a thread of this module then runs a PASSIVE
checkpoint on its own connection, which neither waits for nor blocks the writer and the readers.

SQLite rewinds the WAL only when a write transaction starts from a snapshot with every frame
already copied, and in a stream of commits a checkpoint on another thread almost never lands
between a commit and the next BEGIN: the WAL would grow without end. So when it holds more than
`inline_pages` frames the writer is asked (`due()`) to checkpoint once itself, right after a
commit: the frames left to copy are few by then.

The thread's connection (a database and a WAL file) is opened when commits come and closed after
`idle_s` without one: a store only read, or written once in a while, holds two files fewer. A
connection that cannot be opened (no files left) is tried again at the next commit; the writer's
commits do not depend on it.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import structlog

from .files import out_of_files

log = structlog.get_logger("sessionsearch.store")

INTERVAL_S = 0.05  # at most this often: a checkpoint is an fsync of the WAL and one of the database
INLINE_PAGES = 8_000  # 32 MiB of WAL at 4 KiB pages; SQLite's automatic default is 1,000
IDLE_S = 5.0  # the connection is closed after this long without a commit


class WalCheckpointer:
    def __init__(self, path: Path, *, interval_s: float | None = None, inline_pages: int | None = None,
                 idle_s: float = IDLE_S) -> None:
        self.path = Path(path)
        self.idle_s = idle_s
        self.interval_s = INTERVAL_S if interval_s is None else interval_s
        self.inline_pages = INLINE_PAGES if inline_pages is None else inline_pages
        self._pending = threading.Event()
        self._closed = threading.Event()
        self._inline_due = False
        self._thread: threading.Thread | None = None

    def committed(self) -> None:
        """The writer committed: checkpoint soon (the thread starts on the first commit)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"sessionsearch-checkpoint-{self.path.stem}",
                                            daemon=True)
            self._thread.start()
        self._pending.set()

    def due(self) -> bool:
        """Whether the writer should checkpoint itself now (the WAL outgrew what PASSIVE copies)."""
        if self._inline_due:
            self._inline_due = False
            return True
        return False

    def close(self) -> None:
        self._closed.set()
        self._pending.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                woke = self._pending.wait(self.idle_s if conn is not None else None)
                if not woke and conn is not None:
                    conn.close()  # idle: its files back until the next commit
                    conn = None
                    continue
                if self._closed.is_set():
                    return
                self._pending.clear()
                try:
                    if conn is None:
                        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                    (_busy, frames, _copied), = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # e.g. the file went away; the writer's own commit still works
                    if not out_of_files(exc):  # no files left: the store's opens say so (files.py), at most
                        log.warning("checkpoint.failed", path=str(self.path), error=str(exc))  # once a while
                else:
                    self._inline_due = frames > self.inline_pages  # all copied or not: see above
                self._closed.wait(self.interval_s)
        finally:
            if conn is not None:
                conn.close()
