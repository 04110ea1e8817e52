"""An agent's Newest (store/base.py) on SQLite, answered from memory while its files are unchanged.

A search of many agents reads every agent's Newest (search/visits.py); through a reader that is a
thread hop per agent, what a rare word's whole search costs. Every commit in WAL mode writes the
`-wal` file and a checkpoint writes the database file, so while both keep their inode, size and
mtime the Newest read last still holds. The mtime comes from a clock that advances in ticks: a
commit made in the same tick as the stat would leave it as it was. So an answer is kept only when
both files were last written QUIET_S before the stat that stamps it: a commit after that stat
then sets an mtime at least a tick later than the stat, past the stamp's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..base import Newest

QUIET_S = 1.0  # files written more recently than this are read again each time

# clean hot windows bound their messages' timestamps by ts_max (schema migration 10)
NEWEST_SQL = ("SELECT (SELECT value FROM meta WHERE key = 'meta_version'), "
              "(SELECT max(ts_max) FROM windows WHERE needs_rebuild = 0 AND cold = 0), "
              "(SELECT json_group_array(wid) FROM windows WHERE needs_rebuild = 1)")

Stamp = tuple[int, int, int, int, int, int]


def stamp_of(path: Path | str, wal_path: str | None = None) -> Stamp | None:
    """(inode, size, mtime ns) of the database and its `-wal` file; None when the database is
    missing. A WAL missing or empty holds no frames: the database is all there is, whatever the
    WAL's own stamp. The last connection to close deletes the WAL and the next to open makes a new
    empty one, and a store closed to keep within the open-file budget (OpenBudget) reopens for
    each search of more agents than it holds: what was read of it holds still. `wal_path`: the
    `-wal` file's path, when the caller keeps it (a search of 1,000 agents stamps each two or three
    times: from a Path, 3 ms of CPU a pass, 1.5 ms from strings)."""
    try:
        db = os.stat(path)
    except OSError:
        return None
    try:
        wal = os.stat(wal_path if wal_path is not None else f"{path}-wal")
    except FileNotFoundError:
        return db.st_ino, db.st_size, db.st_mtime_ns, 0, 0, 0
    except OSError:
        return None
    if wal.st_size == 0:
        return db.st_ino, db.st_size, db.st_mtime_ns, 0, 0, 0
    return db.st_ino, db.st_size, db.st_mtime_ns, wal.st_ino, wal.st_size, wal.st_mtime_ns


class NewestKept:
    """The Newest last read, with the files' stamp it holds for."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db, self._wal = str(path), f"{path}-wal"
        self._kept: tuple[Stamp, Newest] | None = None

    def files(self) -> Stamp | None:
        """The files' stamp now (stamp_of)."""
        return stamp_of(self._db, self._wal)

    def stamp(self) -> tuple[Stamp | None, Newest | None]:
        """The files' stamp now and the Newest kept for it (None: to be read)."""
        stamp = stamp_of(self._db, self._wal)
        kept = self._kept
        if stamp is not None and kept is not None and kept[0] == stamp:
            return stamp, kept[1]
        return stamp, None

    def read(self, stamp: Stamp | None, stamped_at: float, row: tuple[Any, ...]) -> Newest:
        """The Newest of NEWEST_SQL's row, read after `stamp` was taken at `stamped_at` (time.time)."""
        version, ts_max, dirty = row
        newest = Newest(version, ts_max, frozenset(json.loads(dirty)))
        quiet = stamp is not None and max(stamp[2], stamp[5]) < (stamped_at - QUIET_S) * 1e9
        self._kept = (stamp, newest) if quiet and stamp is not None else None
        return newest
