"""Write transactions of one agent database, each run whole on the writer's own thread.

A transaction is a plain function over a sqlite3 connection: `BEGIN IMMEDIATE`, its statements,
`COMMIT`. Running it as one job on one thread costs one thread hop per transaction instead of one
per statement, and nothing else can interleave with it. Only this module writes to the database.
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from ...errors import Conflict, InvalidRequest, NotFound, StorageFull, Unavailable
from ...text.cjk import index_text, needs_fold
from ...transcript.append import ids_to_resolve, plan_append
from ...transcript.events import Event
from ..base import EVENT_COLUMNS, AppendResult, session_columns
from ..branch import moved
from ..rowids import MAX_SEQ, MAX_WID, from_v1, id_sql, is_v1, row_id, seq_sql, window_ranges
from .checkpoint import WalCheckpointer
from .migrate import applied_migrations, migrate
from .migrations import TS_MAX_SQL
from .postings import HotWrites
from .prefixes import PrefixWrites
from .turnstile import Turnstile

INSERT_EVENT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
log = structlog.get_logger("sessionsearch.store")

WAL_SIZE_LIMIT = 64 << 20  # bytes the WAL file is cut back to once rewound
TOMBSTONES_KEPT = 20_000  # deletion tombstones kept for views that refresh by changes
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # one encoder, not one per row


def now_ms() -> int:
    return int(time.time() * 1000)


def is_full(exc: BaseException) -> bool:
    """Whether an error says the disk under the data dir is full (SQLite's SQLITE_FULL, or a file
    write's ENOSPC or EDQUOT)."""
    if isinstance(exc, sqlite3.Error):
        return (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF == sqlite3.SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def unwritable(agent_id: str, exc: BaseException) -> Unavailable:
    """The error for a database that could not be written (StorageFull when the disk is full)."""
    error = StorageFull(agent_id) if is_full(exc) else Unavailable(
        f"agent {agent_id!r} database could not be written: {exc}")
    error.__cause__ = exc
    return error


def create_database(path: Path, cold_dir: Path, *, busy_timeout_ms: int) -> None:
    """Make the agent database at `path`, whole or not at all.

    It is built under a name of this process's own and linked into place once migrated: a database
    that failed half way (a full disk) never shows as an agent, and only this process's own files
    are removed after a failure. Another process that creates the same agent meanwhile wins the
    link, and its database is the one used."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex}.new")
    try:
        writer = SqliteWriter(tmp, cold_dir, busy_timeout_ms=busy_timeout_ms, checkpoint_beside=False)
        try:
            # Everything into the database file itself: its WAL does not follow it through the link.
            busy, frames, _copied = writer.c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy or frames:
                raise sqlite3.OperationalError(f"the new database {tmp} kept {frames} WAL frames")
        finally:
            writer.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        for suffix in ("", "-wal", "-shm", "-journal", "-turn"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)


@dataclass(slots=True)
class _WinState:
    session_key: str
    session_id: str
    last_seq: int
    leaf_seq: int | None
    leaf_event_id: str | None
    has_header: bool


class _StaleState(Exception):
    """The cached window state no longer matched the database; reload and retry."""


class SqliteWriter:
    """The one writer of an agent database. Every public method is one transaction (the
    reconciliation steps run through reconcile.py's primitives, the common words' postings are
    in postings.py)."""

    def __init__(self, path: Path, cold_dir: Path, *, busy_timeout_ms: int, checkpoint_beside: bool = True,
                 rows_in_sql: bool = False) -> None:
        self.cold_dir = cold_dir
        self.rows_in_sql = rows_in_sql  # see reconcile.SqliteReconcileTx._diff
        # windows being rebuilt beside another one in the transaction running now; read by this
        # process's jobs from other threads, so replaced whole, never mutated
        self.rebuilding: frozenset[int] = frozenset()
        self.busy_timeout_ms = busy_timeout_ms
        # an import is writing: its windows' writes are not the session's activity (_imported)
        self._importing = False
        self.c = sqlite3.connect(path, isolation_level=None)
        self._checkpoints: WalCheckpointer | None = None
        try:
            self._turnstile = Turnstile(path)
            self.c.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            self.c.create_function("index_text", 1, index_text, deterministic=True)  # fts.INDEX_TEXT_SQL
            self.c.create_function("needs_fold", 1, needs_fold, deterministic=True)  # migration 9
            self.c.execute("PRAGMA journal_mode = WAL")
            self.c.execute("PRAGMA synchronous = NORMAL")
            self._checkpoints = WalCheckpointer(path) if checkpoint_beside else None
            if self._checkpoints is not None:  # checkpoints run beside the writer, not inside its commits
                self.c.execute("PRAGMA wal_autocheckpoint = 0")
                self.c.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
            self._win: dict[int, _WinState] = {}
            self.hot = HotWrites(self.c, self.tx)  # the common words' postings and the index log
            self.prefixes = PrefixWrites(self.c, self.tx, self.hot)  # the 1-8 letter prefixes' postings
            self._current: dict[str, int] = {}
            self.lock_wait_s = 0.0
            self.migrate()
        except BaseException:
            # A migration that meets a full disk, say: the caller never gets this object to close,
            # and the checkpoint thread (started by the first migration's commit) would wait forever.
            self.close()
            raise

    def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.close()
        self.c.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        # how long another process held the write lock (or its turn) before this one began
        self.lock_wait_s = self._turnstile.begin(self.c, self.busy_timeout_ms)
        try:
            yield self.c
            self.c.execute("COMMIT")
        except BaseException:
            # On some errors SQLite has rolled the whole transaction back already (SQLITE_FULL while
            # a statement spills pages to the WAL): a ROLLBACK then fails and would hide the cause.
            if self.c.in_transaction:
                self.c.execute("ROLLBACK")
            self._forget()  # the cached window state may describe rows that were never stored
            raise
        if self._checkpoints is not None:
            self._checkpoints.committed()
            if self._checkpoints.due():
                try:
                    self.c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # the write is committed: it must not be reported failed
                    log.warning("checkpoint.failed", path=str(self._checkpoints.path), error=str(exc))

    def migrate(self) -> None:
        migrate(self.c, self.tx)

    def applied_migrations(self) -> list[tuple[int, str]]:
        return applied_migrations(self.c)

    # -- sessions and windows ----------------------------------------------------------------

    def upsert_session(self, key: str, fields: dict[str, Any]) -> bool:
        """Create or update a session's metadata; returns True when the session is new."""
        with self.tx():
            return self._upsert_tx(key, fields)

    def _upsert_tx(self, key: str, fields: dict[str, Any]) -> bool:
        cols = session_columns(fields, now_ms())
        created = self._ensure_session(key)
        sets = ", ".join(f"{col} = ?" for col in cols)
        self.c.execute(f"UPDATE sessions SET {sets} WHERE session_key = ?", (*cols.values(), key))
        session_id = fields.get("sessionId")
        if isinstance(session_id, str) and session_id:
            self._window_for_write(key, session_id)
        self._bump_meta()
        return created

    def import_rows(self, key: str, fields: dict[str, Any], events: list[Event], session_id: str,
                    source_lines: int) -> AppendResult:
        """An import step in one transaction: the session's metadata, then its rows, unindexed."""
        try:
            with self.tx(), self._imported():
                if fields is not None:
                    self._upsert_tx(key, {**fields, "sessionId": session_id})
                return self._append_tx(key, events, session_id, False, source_lines)
        except BaseException:
            self._forget()
            raise

    @contextmanager
    def _imported(self) -> Iterator[None]:
        """Writes of an import: an imported session's activity is `sessions.json`'s `updatedAt`
        (SPEC §4 activeMinutes), which its metadata upsert sets, never the time of the import, so
        the windows it writes are not stamped (created at 0, their time left as it is)."""
        self._importing = True
        try:
            yield
        finally:
            self._importing = False

    def import_many(self, items: list[tuple[Any, ...]]) -> list[Any]:
        """Several small import steps in one transaction: (key, fields, events, session_id, lines).

        Returns an AppendResult per item; if the shared transaction fails, the items are retried
        one by one so that one bad session costs only itself (its slot then holds the error).
        """
        try:
            with self.tx(), self._imported():
                out = []
                for key, fields, events, session_id, lines in items:
                    if fields is not None:
                        self._upsert_tx(key, {**fields, "sessionId": session_id})
                    out.append(self._append_tx(key, events, session_id, False, lines))
                return out
        except Exception:
            self._forget()
        results: list[Any] = []
        for key, fields, events, session_id, lines in items:
            try:
                results.append(self.import_rows(key, fields, events, session_id, lines))
            except Exception as exc:  # reported by the importer against that file
                results.append(exc)
        return results

    def all_source_lines(self) -> dict[str, int]:
        return dict(self.c.execute("SELECT session_id, source_lines FROM windows"))

    def _ensure_session(self, key: str) -> bool:
        cur = self.c.execute("INSERT INTO sessions (session_key, updated_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                             (key, now_ms()))
        return cur.rowcount > 0

    def _bump_meta(self) -> None:
        self.c.execute("UPDATE meta SET value = value + 1 WHERE key = 'meta_version'")

    def bump_dirty(self) -> None:
        self.c.execute("UPDATE meta SET value = value + 1 WHERE key = 'dirty_version'")

    def _window_for_write(self, key: str, session_id: str | None) -> int:
        """The window a write to `key` goes to, creating session and window as needed (in a tx)."""
        wid: int | None = self._current.get(key)
        if wid is not None and wid in self._win and (session_id is None or self._win[wid].session_id == session_id):
            return wid
        row = self.c.execute("SELECT current_wid FROM sessions WHERE session_key = ?", (key,)).fetchone()
        if row is None:
            self._ensure_session(key)
        current: int | None = row[0] if row else None
        if session_id is not None:
            found = self.c.execute("SELECT wid, session_key FROM windows WHERE session_id = ?",
                                   (session_id,)).fetchone()
            if found:
                if found[1] != key:
                    raise Conflict(f"sessionId {session_id!r} belongs to another session key",
                                   field="sessionId")
                wid = found[0]
                if current is None:
                    self.c.execute("UPDATE sessions SET current_wid = ? WHERE session_key = ?", (wid, key))
                    current = wid
                if wid == current:
                    self._current[key] = wid
                self._load_state(wid)
                return wid
        elif current is not None:
            self._current[key] = current
            self._load_state(current)
            return current
        return self._create_window(key, session_id or str(uuid.uuid4()))  # new key, or the gateway rotated

    def _create_window(self, key: str, session_id: str) -> int:
        now = now_ms()
        wid = self.c.execute(
            "INSERT INTO windows (session_key, session_id, created_at, updated_at) VALUES (?, ?, ?, ?)",
            (key, session_id, now, 0 if self._importing else now)).lastrowid
        assert wid is not None  # an INSERT's row id
        if wid > MAX_WID:  # the ids of its rows would not hold it (rowids.py)
            raise Unavailable(f"this agent's store has used all {MAX_WID} session window numbers")
        self.c.execute("UPDATE sessions SET current_wid = ?, updated_at = coalesce(?, updated_at) "
                       "WHERE session_key = ?", (wid, None if self._importing else now, key))
        self._bump_meta()
        self._current[key] = wid
        self._win[wid] = _WinState(key, session_id, 0, None, None, False)
        return wid

    def _load_state(self, wid: int) -> _WinState:
        r = self.c.execute("SELECT session_key, session_id, last_seq, leaf_seq, leaf_event_id, has_header "
                           "FROM windows WHERE wid = ?", (wid,)).fetchone()
        state = self._win[wid] = _WinState(r[0], r[1], r[2], r[3], r[4], bool(r[5]))
        return state

    def _forget(self) -> None:
        self._win.clear()
        self._current.clear()

    def rotate(self, key: str, session_id: str | None) -> tuple[str, str | None]:
        """Start a new window for `key`; the old one is kept. Returns (new id, previous id)."""
        with self.tx() as c:
            row = c.execute("SELECT w.session_id FROM sessions s LEFT JOIN windows w ON w.wid = s.current_wid "
                            "WHERE s.session_key = ?", (key,)).fetchone()
            if row is None:
                raise NotFound(f"session {key!r} not found")
            new_id = session_id or str(uuid.uuid4())
            if c.execute("SELECT 1 FROM windows WHERE session_id = ?", (new_id,)).fetchone():
                raise Conflict(f"sessionId {new_id!r} already exists", field="sessionId")
            self._create_window(key, new_id)
        return new_id, row[0]

    def delete_session(self, key: str) -> tuple[bool, list[int]]:
        """Remove a session, its windows, transcripts and index rows in one transaction."""
        try:
            with self.tx() as c:
                wids = [r[0] for r in c.execute("SELECT wid FROM windows WHERE session_key = ?", (key,))]
                for wid in wids:
                    self._delete_rows(wid)
                c.execute("DELETE FROM windows WHERE session_key = ?", (key,))
                existed = c.execute("DELETE FROM sessions WHERE session_key = ?", (key,)).rowcount > 0
                self._prune_tombstones()
                self._bump_meta()
                self.bump_dirty()
        finally:
            self._forget()
        self._drop_cold_files(wids)
        return existed, wids

    def _delete_rows(self, wid: int, *, index: bool = True) -> None:
        """Delete a window's transcript rows, and its index rows unless `index` is False."""
        for lo, hi in window_ranges(wid):
            if index:
                self.prefixes.log_gone("rowid BETWEEN ? AND ?", (lo, hi))
                self.c.execute("DELETE FROM msg_fts WHERE rowid BETWEEN ? AND ?", (lo, hi))
                self.c.execute("DELETE FROM embeddings WHERE rid BETWEEN ? AND ?", (lo, hi))
            self.c.execute("DELETE FROM events WHERE id BETWEEN ? AND ?", (lo, hi))

    def _prune_tombstones(self) -> None:
        """Past TOMBSTONES_KEPT deletion tombstones, drop the older half and raise `deleted_from`,
        the meta version below which a view must read the catalog whole (inside a transaction)."""
        if self.c.execute("SELECT 1 FROM catalog_deleted ORDER BY meta_seq DESC LIMIT 1 OFFSET ?",
                          (TOMBSTONES_KEPT,)).fetchone() is None:
            return
        (cut,), = self.c.execute("SELECT meta_seq FROM catalog_deleted ORDER BY meta_seq DESC LIMIT 1 OFFSET ?",
                                 (TOMBSTONES_KEPT // 2,)).fetchall()
        self.c.execute("DELETE FROM catalog_deleted WHERE meta_seq <= ?", (cut,))
        self.c.execute("UPDATE meta SET value = max(value, ?) WHERE key = 'deleted_from'", (cut,))

    # -- appends -----------------------------------------------------------------------------

    def append(self, key: str, events: list[Event], session_id: str | None, index: bool,
               source_lines: int | None) -> AppendResult:
        for _attempt in range(3):
            try:
                with self.tx():
                    return self._append_tx(key, events, session_id, index, source_lines)
            except _StaleState:
                self._forget()
            except BaseException:
                self._forget()
                raise
        raise Unavailable(f"window state of {key!r} kept changing under the writer")

    def _append_tx(self, key: str, events: list[Event], session_id: str | None, index: bool,
                   source_lines: int | None) -> AppendResult:
        c = self.c
        wid = self._window_for_write(key, session_id)
        st = self._win.get(wid) or self._load_state(wid)
        # an empty window (a fresh session, or an import's first chunk) has no ids to look up
        wanted = ids_to_resolve(events, st.leaf_event_id) if st.last_seq else None
        known = self._resolve_ids(wid, wanted) if wanted else {}
        plan = plan_append(events, last_seq=st.last_seq, leaf_seq=st.leaf_seq, leaf_event_id=st.leaf_event_id,
                           has_header=st.has_header, known=known)
        if plan.last_seq > MAX_SEQ:
            raise InvalidRequest(f"session window {st.session_id!r} is full", field="events")
        live = index and plan.linear
        dirty = bool(plan.rows) and not live
        to_index = [r for r in plan.rows if r.on_branch and r.event.text] if live else []
        has_header = st.has_header or any(r.event.type == "session" for r in plan.rows)
        newest = max((r.event.ts for r in plan.rows if r.event.text is not None), default=None)
        oldest = min((r.event.ts for r in plan.rows if r.event.text is not None), default=None)
        guarded = c.execute(
            "UPDATE windows SET last_seq = ?, leaf_seq = ?, leaf_event_id = ?, has_header = ?, "
            "messages = messages + ?, updated_at = coalesce(?, updated_at), source_lines = coalesce(?, source_lines), "
            "needs_rebuild = CASE WHEN ? THEN 1 ELSE needs_rebuild END, rebuild_gen = rebuild_gen + ?, "
            "indexed_seq = CASE WHEN needs_rebuild = 0 AND NOT ? THEN ? ELSE indexed_seq END, "
            "indexed_leaf = CASE WHEN needs_rebuild = 0 AND NOT ? THEN ? ELSE indexed_leaf END, "
            "ts_max = max(coalesce(ts_max, ?), coalesce(?, ts_max)), "  # bounds on its messages' ts (recent.py)
            "ts_min = min(coalesce(ts_min, ?), coalesce(?, ts_min)), "  # (scope.py, id_bounds)
            "needs_embed = needs_embed | ? "  # rows indexed now wait for the embed job (SPEC §3)
            "WHERE wid = ? AND last_seq = ? AND leaf_seq IS ? AND cold = 0 RETURNING needs_rebuild",
            (plan.last_seq, plan.leaf_seq, plan.leaf_event_id, int(has_header),
             plan.messages if plan.linear else 0, None if self._importing else now_ms(), source_lines, dirty,
             int(dirty),
             dirty, plan.last_seq, dirty, plan.leaf_seq, newest, newest, oldest, oldest, int(bool(to_index)),
             wid, st.last_seq,
             st.leaf_seq)).fetchone()
        if guarded is None:
            if c.execute("SELECT 1 FROM windows WHERE wid = ? AND cold = 1", (wid,)).fetchone():
                raise Conflict(f"session {key!r} is archived; restore it before appending", field="sessionKey")
            raise _StaleState()
        if dirty:
            self.bump_dirty()
        if plan.rows:
            c.executemany(INSERT_EVENT, [
                (row_id(wid, r.seq, r.event.role), wid, r.event.event_id, r.parent_seq, r.node_seq, r.event.type,
                 r.event.role, r.event.ts, int(r.on_branch), r.event.text, r.event.raw or _COMPACT.encode(r.event.body))
                for r in plan.rows])
        if to_index:
            indexed = [(row_id(wid, r.seq, r.event.role), index_text(r.event.text or ""), r.event.ts, r.event.event_id)
                       for r in to_index]  # every one has text (to_index)
            c.executemany("INSERT INTO msg_fts (rowid, text, ts, mid) VALUES (?, ?, ?, ?)", indexed)
            self.hot.log_indexed(indexed)
        if not plan.linear:
            self._reproject(wid, plan.leaf_seq)
        self._win[wid] = _WinState(key, st.session_id, plan.last_seq, plan.leaf_seq, plan.leaf_event_id, has_header)
        return AppendResult(appended=len(plan.rows), indexed=len(to_index), needs_reconcile=bool(guarded[0]),
                            session_id=st.session_id, duplicates=plan.duplicates,
                            unknown_parents=plan.unknown_parents)

    def _resolve_ids(self, wid: int, ids: Iterable[str]) -> dict[str, tuple[int, int | None]]:
        ids = list(ids)
        found: dict[str, tuple[int, int | None]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for event_id, seq, node in self.c.execute(
                    f"SELECT event_id, {seq_sql('id')}, node_seq FROM events "
                    f"WHERE wid = ? AND event_id IN ({marks})", (wid, *chunk)):
                found.setdefault(event_id, (seq, node))
        return found

    def _reproject(self, wid: int, leaf_seq: int | None) -> None:
        """Move the window's active branch to `leaf_seq` (non-linear writes), writing only the rows
        whose place changes (store/branch.py)."""
        c = self.c
        walked: list[tuple[int, int]] = []
        if leaf_seq is not None:
            leaf, parent = id_sql(":wid", ":leaf"), id_sql(":wid", "up.parent")
            walked = c.execute(
                "WITH RECURSIVE up(id, parent, on_branch) AS (SELECT e.id, e.parent_seq, e.on_branch FROM events e "
                f"WHERE e.id BETWEEN {leaf} AND {leaf} + 1 UNION ALL "
                "SELECT e.id, e.parent_seq, e.on_branch FROM up JOIN events e "
                f"ON e.id BETWEEN {parent} AND {parent} + 1 WHERE up.on_branch = 0 AND up.parent IS NOT NULL) "
                "SELECT id, on_branch FROM up", {"leaf": leaf_seq, "wid": wid}).fetchall()
        move = moved(wid, walked)
        # the window's message count moves by the indexable rows that left and joined (INDEXABLE)
        change = 0
        for lo, hi in move.leaving:
            change -= sum(m for (m,) in c.execute("UPDATE events SET on_branch = 0 WHERE id BETWEEN ? AND ? "
                                                  "AND on_branch = 1 RETURNING text IS NOT NULL", (lo, hi)))
        for start in range(0, len(move.joining), 500):
            chunk = move.joining[start:start + 500]
            change += sum(m for (m,) in c.execute(
                f"UPDATE events SET on_branch = 1 WHERE id IN ({','.join('?' * len(chunk))}) AND on_branch = 0 "
                "RETURNING text IS NOT NULL", chunk))
        if change:
            c.execute("UPDATE windows SET messages = messages + ? WHERE wid = ?", (change, wid))

    # -- archive -----------------------------------------------------------------------------

    def _cold_path(self, wid: int) -> Path:
        return self.cold_dir / f"{wid}.jsonl.gz"

    def _drop_cold_files(self, wids: list[int]) -> None:
        """After the commit: the transcripts are back in (or gone from) the database."""
        for wid in wids:
            self._cold_path(wid).unlink(missing_ok=True)

    def archive(self, key: str) -> int:
        """Move a session's transcripts to cold files and out of the index; returns windows moved."""
        c = self.c
        if c.execute("SELECT 1 FROM sessions WHERE session_key = ?", (key,)).fetchone() is None:
            raise NotFound(f"session {key!r} not found")
        wids = [r[0] for r in c.execute("SELECT wid FROM windows WHERE session_key = ? AND cold = 0", (key,))]
        self.cold_dir.mkdir(parents=True, exist_ok=True)
        for wid in wids:  # the file is complete on disk before the rows leave the database
            tmp = self._cold_path(wid).with_suffix(".tmp")
            try:
                with open(tmp, "wb") as raw:
                    with gzip.GzipFile(fileobj=raw, mode="wb") as gz, io.TextIOWrapper(gz, encoding="utf-8") as fh:
                        for lo, hi in window_ranges(wid):
                            for row in c.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE id BETWEEN ? AND ? "
                                                 "ORDER BY id", (lo, hi)):
                                fh.write(json.dumps(list(row), ensure_ascii=False) + "\n")
                    raw.flush()
                    os.fsync(raw.fileno())  # on disk, not in the page cache, before the rows are deleted
            except BaseException:
                tmp.unlink(missing_ok=True)  # a part-written file would only hold on to the space
                raise
            os.replace(tmp, self._cold_path(wid))
        if wids:  # the renames too: a crash after the commit below finds every file under its name
            _fsync_dir(self.cold_dir)
        try:
            with self.tx():
                for wid in wids:
                    self._delete_rows(wid)
                    c.execute("UPDATE windows SET cold = 1 WHERE wid = ?", (wid,))
                c.execute("UPDATE sessions SET archived_at = ? WHERE session_key = ?", (now_ms(), key))
                self._bump_meta()
        finally:
            self._forget()
        return len(wids)

    def restore(self, key: str) -> list[int]:
        """Bring a session's cold transcripts back; they need reconciliation to be searchable again."""
        c = self.c
        if c.execute("SELECT 1 FROM sessions WHERE session_key = ?", (key,)).fetchone() is None:
            raise NotFound(f"session {key!r} not found")
        wids = [r[0] for r in c.execute("SELECT wid FROM windows WHERE session_key = ? AND cold = 1", (key,))]
        try:
            with self.tx():
                for wid in wids:
                    path = self._cold_path(wid)
                    self._delete_rows(wid, index=False)
                    if path.exists():
                        with gzip.open(path, "rt", encoding="utf-8") as fh:
                            c.executemany(INSERT_EVENT, (_current_ids(json.loads(line)) for line in fh))
                    c.execute("UPDATE windows SET cold = 0, needs_rebuild = 1, rebuild_gen = rebuild_gen + 1 "
                              "WHERE wid = ?", (wid,))
                    c.execute(TS_MAX_SQL, {"wid": wid})
                c.execute("UPDATE sessions SET archived_at = NULL WHERE session_key = ?", (key,))
                self._bump_meta()
                self.bump_dirty()
        finally:
            self._forget()
        self._drop_cold_files(wids)
        return wids


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _current_ids(row: list[Any]) -> tuple[Any, ...]:
    """A cold file's row (EVENT_COLUMNS: id, wid, …) with its id in the current layout: files
    archived before schema version 6 hold the old one."""
    if is_v1(row[0], row[1]):
        row[0] = from_v1(row[0])
    return tuple(row)
