"""Opens that fail for want of files: told apart from other failures, answered 503 (OutOfFiles),
and logged at most once an interval however many fail (the budget: limits.py)."""

from __future__ import annotations

import errno
import resource
import sqlite3
import threading
import time

import structlog

from ...errors import OutOfFiles

log = structlog.get_logger("sessionsearch.store")

OUT_OF_FILES_LOG_S = 10.0  # one warning a store's opens failed for want of files, at most this often


def out_of_files(exc: BaseException) -> bool:
    """Whether an error is a file that could not be opened: EMFILE or ENFILE, or SQLite's
    SQLITE_CANTOPEN ("unable to open database file"), which is what either becomes inside SQLite
    (a store's files are there: open_store checked)."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.EMFILE, errno.ENFILE)
    if isinstance(exc, sqlite3.Error):
        return (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF == sqlite3.SQLITE_CANTOPEN
    return False


class _Warned:
    """At most one warning an interval, counting the failures between them (no flood while the
    files stay short)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._last = -float("inf")
        self._since = 0
        self._lock = threading.Lock()

    def failed(self, agent_id: str, exc: BaseException) -> None:
        with self._lock:
            self._since += 1
            now = time.monotonic()
            if now - self._last < self.interval_s:
                return
            self._last, failures, self._since = now, self._since, 0
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        log.warning("store.out_of_files", agent_id=agent_id, error=str(exc), failures=failures,
                    interval_s=self.interval_s, limit=soft)


_warned = _Warned(OUT_OF_FILES_LOG_S)


def no_files(agent_id: str | None, exc: BaseException) -> OutOfFiles:
    """The error for an open that failed for want of files (logged at most once an interval);
    `agent_id` None: the agents folder itself could not be read."""
    _warned.failed(agent_id or "", exc)
    whose = f"agent {agent_id!r}" if agent_id else "the agents folder"
    error = OutOfFiles(f"{whose}: the server cannot open a file now (too many open files); "
                       "retry shortly", agent_id=agent_id)
    error.__cause__ = exc
    return error
