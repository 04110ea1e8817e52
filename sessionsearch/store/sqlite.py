"""The SQLite backend: one database per agent, one writer connection, a pool of readers.

Every write runs on the writer under `BEGIN IMMEDIATE`; searches and history reads run on reader
connections (WAL lets them proceed while the writer commits), each with a progress handler that
interrupts a statement past its deadline. Nothing outside store/ writes SQL.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import os
import sqlite3
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterable

import aiosqlite

from ..errors import InvalidRequest, NotFound, SearchTimeout, Unavailable
from ..indexer.events import Event
from ..indexer.live import Plan, ids_to_resolve, plan_append
from .base import AppendResult, ClaimInfo, SessionMeta, WindowMeta
from .rowids import MAX_SEQ, row_id, seq_range, window_range
from .schema import MIGRATIONS

SESSION_COLUMNS = {  # wire name -> column
    "label": "label", "displayName": "display_name", "spawnedBy": "spawned_by",
    "parentSessionKey": "parent_session_key", "kind": "kind", "group": "grp",
    "incognito": "incognito", "archivedAt": "archived_at", "updatedAt": "updated_at",
}
EVENT_COLUMNS = "id, wid, event_id, parent_seq, node_seq, type, role, ts, on_branch, text, body"
INDEXABLE = "on_branch = 1 AND text IS NOT NULL"
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # one encoder, not one per row


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class _WinState:
    session_key: str
    last_seq: int
    leaf_seq: int | None
    leaf_event_id: str | None
    has_header: bool


class _Reader:
    """A reader connection whose statements are interrupted once `deadline` (monotonic s) passes."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn
        self.deadline = math.inf

    def expired(self) -> int:
        return 1 if time.monotonic() > self.deadline else 0


class SqliteAgentStore:
    """The transcripts, index and index state of one agent, in `<data_dir>/agents/<agentId>.db`."""

    def __init__(self, path: Path, agent_id: str, *, readers: int = 4, cold_dir: Path | None = None,
                 busy_timeout_ms: int = 30_000) -> None:
        self.path = Path(path)
        self.agent_id = agent_id
        self.cold_dir = Path(cold_dir) if cold_dir else self.path.parent / "cold" / agent_id
        self._max_readers = max(1, readers)
        self._busy_timeout_ms = busy_timeout_ms
        self._w: aiosqlite.Connection | None = None
        self._wlock = asyncio.Lock()
        self._readers: asyncio.Queue[_Reader] = asyncio.Queue()
        self._all_readers: list[_Reader] = []
        self._win: dict[int, _WinState] = {}
        self._current: dict[str, int] = {}
        self._win_session_id: dict[int, str] = {}
        self.meta_cache: tuple[int, Any] | None = None  # (meta_version, what search derived from it)

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> "SqliteAgentStore":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._w = await aiosqlite.connect(self.path, isolation_level=None)
        except sqlite3.Error as exc:
            raise Unavailable(f"cannot open {self.path}: {exc}") from exc
        await self._w.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        await self._w.execute("PRAGMA journal_mode = WAL")
        await self._w.execute("PRAGMA synchronous = NORMAL")
        await self._w.execute("PRAGMA foreign_keys = OFF")
        await self._migrate()
        return self

    async def close(self) -> None:
        for reader in self._all_readers:
            await reader.conn.close()
        self._all_readers.clear()
        self._readers = asyncio.Queue()
        if self._w is not None:
            await self._w.close()
            self._w = None

    async def _migrate(self) -> None:
        w = self._writer
        await w.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                        "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)")
        for version, name, script in MIGRATIONS:
            async with self._tx():
                done = await w.execute_fetchall("SELECT 1 FROM schema_migrations WHERE version = ?", (version,))
                if done:
                    continue
                for statement in _statements(script):
                    await w.execute(statement)
                await w.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (version, name, now_ms()))

    async def applied_migrations(self) -> list[tuple[int, str]]:
        rows = await self._writer.execute_fetchall("SELECT version, name FROM schema_migrations ORDER BY version")
        return [(r[0], r[1]) for r in rows]

    @property
    def _writer(self) -> aiosqlite.Connection:
        if self._w is None:
            raise Unavailable(f"agent store {self.agent_id} is closed")
        return self._w

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[aiosqlite.Connection]:
        """A write transaction; callers hold `_wlock` (migrations run before anyone else can)."""
        w = self._writer
        await w.execute("BEGIN IMMEDIATE")
        try:
            yield w
        except BaseException:
            await w.execute("ROLLBACK")
            raise
        else:
            await w.execute("COMMIT")

    @asynccontextmanager
    async def reader(self, deadline: float = math.inf) -> AsyncIterator[_Reader]:
        """Borrow a reader connection; waiting for one counts against `deadline` (monotonic s)."""
        if self._readers.empty() and len(self._all_readers) < self._max_readers:
            conn = await aiosqlite.connect(self.path, isolation_level=None)
            await conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            await conn.execute("PRAGMA query_only = 1")
            reader = _Reader(conn)
            await conn.set_progress_handler(reader.expired, 2000)
            self._all_readers.append(reader)
            self._readers.put_nowait(reader)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SearchTimeout()
        if not self._readers.empty():
            reader = self._readers.get_nowait()
        else:
            try:
                reader = await asyncio.wait_for(self._readers.get(), None if math.isinf(remaining) else remaining)
            except asyncio.TimeoutError:
                raise SearchTimeout() from None
        reader.deadline = deadline
        try:
            yield reader
        except sqlite3.OperationalError as exc:
            if "interrupted" in str(exc):
                raise SearchTimeout() from None
            raise
        finally:
            reader.deadline = math.inf
            self._readers.put_nowait(reader)

    # -- sessions and windows ----------------------------------------------------------------

    async def upsert_session(self, key: str, fields: dict[str, Any]) -> bool:
        """Create or update a session's metadata; returns True when the session is new."""
        cols = {SESSION_COLUMNS[k]: _column_value(k, v) for k, v in fields.items() if k in SESSION_COLUMNS}
        extra = {k: v for k, v in fields.items() if k not in SESSION_COLUMNS and k != "sessionId"}
        cols.setdefault("updated_at", now_ms())
        async with self._wlock, self._tx() as w:
            created = await self._ensure_session(key)
            if extra:
                cols["extra"] = json.dumps(extra, ensure_ascii=False)
            sets = ", ".join(f"{c} = ?" for c in cols)
            await w.execute(f"UPDATE sessions SET {sets} WHERE session_key = ?", (*cols.values(), key))
            session_id = fields.get("sessionId")
            if isinstance(session_id, str) and session_id:
                await self._window_for_write(key, session_id)
            await self._bump_meta()
        return created

    async def _ensure_session(self, key: str) -> bool:
        cur = await self._writer.execute(
            "INSERT INTO sessions (session_key, updated_at) VALUES (?, ?) ON CONFLICT DO NOTHING", (key, now_ms()))
        return cur.rowcount > 0

    async def _bump_meta(self) -> None:
        await self._writer.execute("UPDATE meta SET value = value + 1 WHERE key = 'meta_version'")

    async def _window_for_write(self, key: str, session_id: str | None) -> int:
        """The window a write to `key` goes to, creating session and window as needed (in a tx)."""
        wid = self._current.get(key)
        if wid is not None and (session_id is None or self._win_session_id.get(wid) == session_id):
            return wid
        w = self._writer
        rows = await w.execute_fetchall("SELECT current_wid FROM sessions WHERE session_key = ?", (key,))
        if not rows:
            await self._ensure_session(key)
            current = None
        else:
            current = rows[0][0]
        if session_id is not None:
            found = await w.execute_fetchall("SELECT wid, session_key FROM windows WHERE session_id = ?",
                                             (session_id,))
            if found:
                if found[0][1] != key:
                    raise InvalidRequest(f"sessionId {session_id!r} belongs to another session key",
                                         field="sessionId")
                wid = found[0][0]
                if current is None:
                    await w.execute("UPDATE sessions SET current_wid = ? WHERE session_key = ?", (wid, key))
                    current = wid
                if wid == current:
                    self._current[key] = wid
                await self._load_state(wid)
                return wid
        elif current is not None:
            self._current[key] = current
            await self._load_state(current)
            return current
        # a new window: the first of the key, or the gateway rotated to a new session id
        wid = await self._create_window(key, session_id or _new_session_id())
        return wid

    async def _create_window(self, key: str, session_id: str) -> int:
        w = self._writer
        now = now_ms()
        cur = await w.execute(
            "INSERT INTO windows (session_key, session_id, created_at, updated_at) VALUES (?, ?, ?, ?)",
            (key, session_id, now, now))
        wid = cur.lastrowid
        await w.execute("UPDATE sessions SET current_wid = ?, updated_at = ? WHERE session_key = ?", (wid, now, key))
        await self._bump_meta()
        self._current[key] = wid
        self._win[wid] = _WinState(key, 0, None, None, False)
        self._win_session_id[wid] = session_id
        return wid

    async def _load_state(self, wid: int) -> _WinState:
        rows = await self._writer.execute_fetchall(
            "SELECT session_key, last_seq, leaf_seq, leaf_event_id, has_header, session_id "
            "FROM windows WHERE wid = ?", (wid,))
        r = rows[0]
        state = _WinState(r[0], r[1], r[2], r[3], bool(r[4]))
        self._win[wid] = state
        self._win_session_id[wid] = r[5]
        return state

    def _forget(self, key: str | None = None) -> None:
        self._win.clear()
        self._win_session_id.clear()
        self._current.clear() if key is None else self._current.pop(key, None)

    async def rotate(self, key: str, session_id: str | None) -> tuple[str, str | None]:
        """Start a new window for `key`; the old one is kept. Returns (new id, previous id)."""
        async with self._wlock, self._tx() as w:
            rows = await w.execute_fetchall(
                "SELECT w.session_id FROM sessions s LEFT JOIN windows w ON w.wid = s.current_wid "
                "WHERE s.session_key = ?", (key,))
            if not rows:
                raise NotFound(f"session {key!r} not found")
            previous = rows[0][0]
            new_id = session_id or _new_session_id()
            taken = await w.execute_fetchall("SELECT 1 FROM windows WHERE session_id = ?", (new_id,))
            if taken:
                raise InvalidRequest(f"sessionId {new_id!r} already exists", field="sessionId")
            await self._create_window(key, new_id)
        return new_id, previous

    async def delete_session(self, key: str) -> bool:
        """Remove a session, its windows, transcripts and index rows in one transaction."""
        async with self._wlock:
            async with self._tx() as w:
                wids = [r[0] for r in await w.execute_fetchall(
                    "SELECT wid FROM windows WHERE session_key = ?", (key,))]
                for wid in wids:
                    lo, hi = window_range(wid)
                    await w.execute("DELETE FROM msg_fts WHERE rowid BETWEEN ? AND ?", (lo, hi))
                    await w.execute("DELETE FROM events WHERE id BETWEEN ? AND ?", (lo, hi))
                await w.execute("DELETE FROM windows WHERE session_key = ?", (key,))
                cur = await w.execute("DELETE FROM sessions WHERE session_key = ?", (key,))
                existed = cur.rowcount > 0
                await self._bump_meta()
            self._forget(key)
        for wid in wids:
            self._cold_path(wid).unlink(missing_ok=True)
        return existed

    # -- appends -----------------------------------------------------------------------------

    async def append(self, key: str, events: list[Event], *, session_id: str | None = None,
                     index: bool = True, source_lines: int | None = None) -> AppendResult:
        """Store a batch of validated events in one transaction.

        A batch that only extends the active branch has its user/assistant text indexed in the same
        transaction (when `index`); anything else, or `index=False` (bulk import), marks the window
        for reconciliation. `source_lines` records how far an import file has been consumed.
        """
        async with self._wlock:
            for _attempt in range(3):
                try:
                    async with self._tx():
                        return await self._append_tx(key, events, session_id, index, source_lines)
                except _StaleState:
                    self._forget()
            raise Unavailable(f"window state of {key!r} kept changing under the writer")

    async def _append_tx(self, key: str, events: list[Event], session_id: str | None, index: bool,
                         source_lines: int | None) -> AppendResult:
        w = self._writer
        wid = await self._window_for_write(key, session_id)
        st = self._win.get(wid) or await self._load_state(wid)
        wanted = ids_to_resolve(events, st.leaf_event_id)
        known = await self._resolve_ids(wid, wanted) if wanted else {}
        plan = plan_append(events, last_seq=st.last_seq, leaf_seq=st.leaf_seq, leaf_event_id=st.leaf_event_id,
                           has_header=st.has_header, known=known)
        if plan.last_seq > MAX_SEQ:
            raise InvalidRequest(f"session window {self._win_session_id.get(wid)!r} is full", field="events")
        live = index and plan.linear
        dirty = bool(plan.rows) and not live
        to_index = [r for r in plan.rows if r.on_branch and r.event.text] if live else []
        now = now_ms()
        guarded = await w.execute_fetchall(
            "UPDATE windows SET last_seq = ?, leaf_seq = ?, leaf_event_id = ?, has_header = ?, "
            "messages = messages + ?, updated_at = ?, source_lines = coalesce(?, source_lines), "
            "needs_rebuild = CASE WHEN ? THEN 1 ELSE needs_rebuild END, "
            "rebuild_gen = rebuild_gen + ?, "
            "indexed_seq = CASE WHEN needs_rebuild = 0 AND NOT ? THEN ? ELSE indexed_seq END, "
            "indexed_leaf = CASE WHEN needs_rebuild = 0 AND NOT ? THEN ? ELSE indexed_leaf END "
            "WHERE wid = ? AND last_seq = ? AND leaf_seq IS ? AND cold = 0 RETURNING needs_rebuild",
            (plan.last_seq, plan.leaf_seq, plan.leaf_event_id,
             int(st.has_header or any(r.event.type == "session" for r in plan.rows)),
             plan.messages if plan.linear else 0, now, source_lines, dirty, int(dirty),
             dirty, plan.last_seq, dirty, plan.leaf_seq, wid, st.last_seq, st.leaf_seq))
        if not guarded:
            cold = await w.execute_fetchall("SELECT 1 FROM windows WHERE wid = ? AND cold = 1", (wid,))
            if cold:
                raise InvalidRequest(f"session {key!r} is archived; restore it before appending",
                                     field="sessionKey")
            raise _StaleState()
        if plan.rows:
            await w.executemany(
                f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(row_id(wid, r.seq, r.event.role), wid, r.event.event_id, r.parent_seq, r.node_seq,
                  r.event.type, r.event.role, r.event.ts, int(r.on_branch), r.event.text,
                  _COMPACT.encode(r.event.body)) for r in plan.rows])
        if to_index:
            await w.executemany("INSERT INTO msg_fts (rowid, text) VALUES (?, ?)",
                                [(row_id(wid, r.seq, r.event.role), r.event.text) for r in to_index])
        if not plan.linear:
            await self._reproject(wid, plan.leaf_seq)
        self._win[wid] = _WinState(key, plan.last_seq, plan.leaf_seq, plan.leaf_event_id,
                                   st.has_header or any(r.event.type == "session" for r in plan.rows))
        return AppendResult(appended=len(plan.rows), indexed=len(to_index), needs_reconcile=bool(guarded[0][0]),
                            duplicates=plan.duplicates, unknown_parents=plan.unknown_parents,
            session_id=self._win_session_id[wid])

    async def _resolve_ids(self, wid: int, ids: Iterable[str]) -> dict[str, tuple[int, int | None]]:
        ids = list(ids)
        found: dict[str, tuple[int, int | None]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            rows = await self._writer.execute_fetchall(
                f"SELECT event_id, (id >> 1) & {MAX_SEQ}, node_seq FROM events "
                f"WHERE wid = ? AND event_id IN ({marks})", (wid, *chunk))
            for event_id, seq, node in rows:
                found.setdefault(event_id, (seq, node))
        return found

    async def _reproject(self, wid: int, leaf_seq: int | None) -> None:
        """Recompute the active-branch projection of a window from its leaf (non-linear writes)."""
        w = self._writer
        lo, hi = window_range(wid)
        await w.execute("UPDATE events SET on_branch = 0 WHERE id BETWEEN ? AND ? AND on_branch = 1", (lo, hi))
        if leaf_seq is not None:
            await w.execute(
                "WITH RECURSIVE up(s) AS (SELECT :leaf UNION ALL "
                "  SELECT e.parent_seq FROM up JOIN events e "
                "    ON e.id BETWEEN :base + (up.s << 1) AND :base + (up.s << 1) + 1 "
                "  WHERE e.parent_seq IS NOT NULL) "
                "UPDATE events SET on_branch = 1 WHERE id IN "
                "  (SELECT :base + (s << 1) + b FROM up, (SELECT 0 AS b UNION ALL SELECT 1))",
                {"leaf": leaf_seq, "base": lo})
        await w.execute(
            f"UPDATE windows SET messages = (SELECT count(*) FROM events WHERE id BETWEEN ? AND ? AND {INDEXABLE}) "
            "WHERE wid = ?", (lo, hi, wid))

    # -- reconciliation primitives (called by indexer.reconcile) ----------------------------

    async def claim(self, wid: int, token: str, lease_s: float) -> ClaimInfo | None:
        """Take the window's claim if free or expired; None when another holder's lease is live."""
        now = time.time()
        async with self._wlock, self._tx() as w:
            rows = await w.execute_fetchall(
                "UPDATE windows SET claim_token = ?, claim_expires_at = ? "
                "WHERE wid = ? AND (claim_token IS NULL OR claim_expires_at < ?) "
                "RETURNING needs_rebuild, rebuild_gen, last_seq, cold",
                (token, now + lease_s, wid, now))
        if not rows:
            return None
        r = rows[0]
        return ClaimInfo(needs_rebuild=bool(r[0]), rebuild_gen=r[1], last_seq=r[2], cold=bool(r[3]))

    async def window_exists(self, wid: int) -> bool:
        rows = await self._writer.execute_fetchall("SELECT 1 FROM windows WHERE wid = ?", (wid,))
        return bool(rows)

    async def reconcile_batch(self, wid: int, token: str, first_seq: int, last_seq: int,
                              lease_s: float) -> tuple[int, int] | None:
        """Make the index rows of seqs first..last match the active branch, if the claim is still ours.

        Returns (rows deleted, rows inserted), or None when the claim was lost.
        """
        lo, hi = seq_range(wid, first_seq, last_seq)
        async with self._wlock, self._tx() as w:
            held = await w.execute_fetchall(
                "UPDATE windows SET claim_expires_at = ? WHERE wid = ? AND claim_token = ? RETURNING 1",
                (time.time() + lease_s, wid, token))
            if not held:
                return None
            deleted = await w.execute(
                "DELETE FROM msg_fts WHERE rowid BETWEEN :lo AND :hi AND rowid NOT IN "
                f"(SELECT id FROM events WHERE id BETWEEN :lo AND :hi AND {INDEXABLE})", {"lo": lo, "hi": hi})
            inserted = await w.execute(
                "INSERT INTO msg_fts (rowid, text) SELECT id, text FROM events "
                f"WHERE id BETWEEN :lo AND :hi AND {INDEXABLE} AND id NOT IN "
                "(SELECT rowid FROM msg_fts WHERE rowid BETWEEN :lo AND :hi)", {"lo": lo, "hi": hi})
            return deleted.rowcount, inserted.rowcount

    async def publish(self, wid: int, token: str, rebuild_gen: int) -> str:
        """Mark the window indexed if the claim is ours and no non-linear write came meanwhile.

        Returns "published", "changed" (a rewind or import arrived: go round again) or "lost".
        """
        async with self._wlock, self._tx() as w:
            rows = await w.execute_fetchall(
                "UPDATE windows SET needs_rebuild = 0, indexed_seq = last_seq, indexed_leaf = leaf_seq, "
                "claim_token = NULL, claim_expires_at = NULL "
                "WHERE wid = ? AND claim_token = ? AND rebuild_gen = ? RETURNING 1", (wid, token, rebuild_gen))
            if rows:
                return "published"
            held = await w.execute_fetchall("SELECT 1 FROM windows WHERE wid = ? AND claim_token = ?", (wid, token))
            return "changed" if held else "lost"

    async def release(self, wid: int, token: str) -> None:
        async with self._wlock, self._tx() as w:
            await w.execute("UPDATE windows SET claim_token = NULL, claim_expires_at = NULL "
                            "WHERE wid = ? AND claim_token = ?", (wid, token))

    async def window_gen(self, wid: int) -> tuple[int, int, bool] | None:
        rows = await self._writer.execute_fetchall(
            "SELECT rebuild_gen, last_seq, needs_rebuild FROM windows WHERE wid = ?", (wid,))
        return (rows[0][0], rows[0][1], bool(rows[0][2])) if rows else None

    async def sweep_orphans(self) -> int:
        """Delete index rows whose window is gone, cold, or whose row is off the active branch."""
        async with self._wlock, self._tx() as w:
            cur = await w.execute(
                "DELETE FROM msg_fts WHERE rowid IN (SELECT f.rowid FROM msg_fts f "
                "LEFT JOIN windows win ON win.wid = (f.rowid >> 31) "
                "WHERE win.wid IS NULL OR win.cold = 1 OR (win.needs_rebuild = 0 AND NOT EXISTS "
                f"(SELECT 1 FROM events e WHERE e.id = f.rowid AND e.{INDEXABLE.replace(' AND ', ' AND e.')})))")
            return cur.rowcount

    async def dirty_windows(self) -> list[int]:
        rows = await self._writer.execute_fetchall("SELECT wid FROM windows WHERE needs_rebuild = 1 ORDER BY wid")
        return [r[0] for r in rows]

    # -- archive -----------------------------------------------------------------------------

    def _cold_path(self, wid: int) -> Path:
        return self.cold_dir / f"{wid}.jsonl.gz"

    async def archive(self, key: str) -> int:
        """Move a session's transcripts to cold files and out of the index; returns windows moved."""
        async with self._wlock:
            rows = await self._writer.execute_fetchall(
                "SELECT wid FROM windows WHERE session_key = ? AND cold = 0", (key,))
            if not await self._writer.execute_fetchall("SELECT 1 FROM sessions WHERE session_key = ?", (key,)):
                raise NotFound(f"session {key!r} not found")
            wids = [r[0] for r in rows]
            self.cold_dir.mkdir(parents=True, exist_ok=True)
            for wid in wids:
                lo, hi = window_range(wid)
                events = await self._writer.execute_fetchall(
                    f"SELECT {EVENT_COLUMNS} FROM events WHERE id BETWEEN ? AND ? ORDER BY id", (lo, hi))
                tmp = self._cold_path(wid).with_suffix(".tmp")
                with gzip.open(tmp, "wt", encoding="utf-8") as fh:
                    for e in events:
                        fh.write(json.dumps(list(e), ensure_ascii=False) + "\n")
                    fh.flush()
                os.replace(tmp, self._cold_path(wid))
            async with self._tx() as w:
                for wid in wids:
                    lo, hi = window_range(wid)
                    await w.execute("DELETE FROM msg_fts WHERE rowid BETWEEN ? AND ?", (lo, hi))
                    await w.execute("DELETE FROM events WHERE id BETWEEN ? AND ?", (lo, hi))
                    await w.execute("UPDATE windows SET cold = 1 WHERE wid = ?", (wid,))
                await w.execute("UPDATE sessions SET archived_at = ? WHERE session_key = ?", (now_ms(), key))
                await self._bump_meta()
            self._forget(key)
        return len(wids)

    async def restore(self, key: str) -> int:
        """Bring a session's cold transcripts back; they need reconciliation to be searchable again."""
        async with self._wlock:
            rows = await self._writer.execute_fetchall(
                "SELECT wid FROM windows WHERE session_key = ? AND cold = 1", (key,))
            if not await self._writer.execute_fetchall("SELECT 1 FROM sessions WHERE session_key = ?", (key,)):
                raise NotFound(f"session {key!r} not found")
            wids = [r[0] for r in rows]
            async with self._tx() as w:
                for wid in wids:
                    path = self._cold_path(wid)
                    batch = []
                    if path.exists():
                        with gzip.open(path, "rt", encoding="utf-8") as fh:
                            batch = [tuple(json.loads(line)) for line in fh]
                    lo, hi = window_range(wid)
                    await w.execute("DELETE FROM events WHERE id BETWEEN ? AND ?", (lo, hi))
                    await w.executemany(
                        f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", batch)
                    await w.execute("UPDATE windows SET cold = 0, needs_rebuild = 1, rebuild_gen = rebuild_gen + 1 "
                                    "WHERE wid = ?", (wid,))
                await w.execute("UPDATE sessions SET archived_at = NULL WHERE session_key = ?", (key,))
                await self._bump_meta()
            self._forget(key)
        for wid in wids:
            self._cold_path(wid).unlink(missing_ok=True)
        return len(wids)

    # -- reads -------------------------------------------------------------------------------

    async def meta_snapshot(self, reader: _Reader) -> tuple[int, list[SessionMeta], list[WindowMeta]]:
        """Everything search scoping needs: the meta version, sessions and windows."""
        conn = reader.conn
        version = (await conn.execute_fetchall("SELECT value FROM meta WHERE key = 'meta_version'"))[0][0]
        sessions = [SessionMeta(*r) for r in await conn.execute_fetchall(
            "SELECT s.session_key, w.session_id, s.label, s.display_name, s.spawned_by, s.parent_session_key, "
            "s.kind, s.grp, s.incognito, s.archived_at, max(s.updated_at, coalesce(w.updated_at, 0)) "
            "FROM sessions s LEFT JOIN windows w ON w.wid = s.current_wid")]
        windows = [WindowMeta(*r) for r in await conn.execute_fetchall(
            "SELECT wid, session_key, session_id, cold FROM windows")]
        return version, sessions, windows

    async def search_top(self, reader: _Reader, match: str, *, k: int, order: str,
                         include: list[int] | None, exclude: list[int] | None, role: str | None,
                         rank_equals: float | None = None) -> tuple[int, list[int], list[tuple]]:
        """One statement: the meta version, the dirty windows and the top `k` hits of `match`.

        Hits are (id, bm25, event_id, ts, text); windows needing reconciliation never match.
        `rank_equals` fetches every hit whose bm25 equals it (ties at the cut).
        """
        where = ["msg_fts MATCH :match", "(rowid >> 31) NOT IN dirty"]
        params: dict[str, Any] = {"match": match, "k": k}
        if include is not None:
            where.append("(rowid >> 31) IN (SELECT value FROM json_each(:incl))")
            params["incl"] = json.dumps(include)
            lo, _ = window_range(min(include)) if include else (0, 0)
            _, hi = window_range(max(include)) if include else (0, 0)
            where.append("rowid BETWEEN :lo AND :hi")
            params.update(lo=lo, hi=hi)
        if exclude:
            where.append("(rowid >> 31) NOT IN (SELECT value FROM json_each(:excl))")
            params["excl"] = json.dumps(exclude)
        if role is not None:
            where.append("(rowid & 1) = :rb")
            params["rb"] = 1 if role == "assistant" else 0
        if rank_equals is not None:
            where.append("bm25(msg_fts) = :req")
            params["req"] = rank_equals
        cond = " AND ".join(where)
        if order == "recent":
            top = (f"SELECT f.rowid AS id, bm25(msg_fts) AS rank FROM msg_fts f JOIN events e ON e.id = f.rowid "
                   f"WHERE {cond.replace('rowid', 'f.rowid')} ORDER BY e.ts DESC, e.event_id LIMIT :k")
        else:
            top = f"SELECT rowid AS id, bm25(msg_fts) AS rank FROM msg_fts WHERE {cond} ORDER BY rank LIMIT :k"
        sql = (f"WITH dirty AS (SELECT wid FROM windows WHERE needs_rebuild = 1), top AS ({top}) "
               "SELECT NULL, (SELECT value FROM meta WHERE key = 'meta_version'), "
               "(SELECT json_group_array(wid) FROM dirty), NULL, NULL "
               "UNION ALL SELECT top.id, top.rank, e.event_id, e.ts, e.text FROM top JOIN events e ON e.id = top.id")
        rows = await reader.conn.execute_fetchall(sql, params)
        head, hits = rows[0], rows[1:]
        return head[1], json.loads(head[2]), [tuple(r) for r in hits]

    async def scan_substrings(self, reader: _Reader, needles: list[str], match: str | None, *,
                              include: list[int] | None, exclude: list[int] | None, role: str | None,
                              k: int) -> tuple[int, list[tuple]]:
        """The CJK retry: indexed rows in scope containing every needle as a literal substring.

        Needles are compared with ASCII case folded (CJK has no case). Returns how many rows
        matched and the best `k` as (id, rank, event_id, ts, text), rank lower-is-better by
        occurrences per length, then newest first.
        """
        where = ["(f.rowid >> 31) NOT IN (SELECT wid FROM windows WHERE needs_rebuild = 1)"]
        params: dict[str, Any] = {"k": k}
        if match:
            where.append("msg_fts MATCH :match")
            params["match"] = match
        hits = []
        for i, needle in enumerate(needles):
            where.append(f"instr(lower(f.text), :n{i}) > 0")
            hits.append(f"(length(f.text) - length(replace(lower(f.text), :n{i}, ''))) / length(:n{i})")
            params[f"n{i}"] = needle.lower()
        if include is not None:
            where.append("(f.rowid >> 31) IN (SELECT value FROM json_each(:incl))")
            params["incl"] = json.dumps(include)
        if exclude:
            where.append("(f.rowid >> 31) NOT IN (SELECT value FROM json_each(:excl))")
            params["excl"] = json.dumps(exclude)
        if role is not None:
            where.append("(f.rowid & 1) = :rb")
            params["rb"] = 1 if role == "assistant" else 0
        occurrences = " + ".join(hits) or "0"
        rows = await reader.conn.execute_fetchall(
            f"WITH m AS (SELECT f.rowid AS id, -1000.0 * ({occurrences}) / (length(f.text) + 100) AS rank "
            f"FROM msg_fts f WHERE {' AND '.join(where)}), "
            "top AS (SELECT m.id, m.rank, e.ts FROM m JOIN events e ON e.id = m.id "
            "ORDER BY m.rank, e.ts DESC LIMIT :k) "
            "SELECT (SELECT count(*) FROM m), NULL, NULL, NULL, NULL "
            "UNION ALL SELECT top.id, top.rank, e.event_id, e.ts, e.text FROM top JOIN events e ON e.id = top.id",
            params)
        return rows[0][0], [tuple(r) for r in rows[1:]]

    async def corpus_stats(self, reader: _Reader, terms: list[str]) -> tuple[int, dict[str, int]]:
        """Indexed rows in all and the document frequency of each (folded) term."""
        total = (await reader.conn.execute_fetchall("SELECT count(*) FROM msg_fts_docsize"))[0][0]
        freqs = {}
        for term in terms:
            rows = await reader.conn.execute_fetchall("SELECT doc FROM msg_vocab WHERE term = ?", (term,))
            freqs[term] = rows[0][0] if rows else 0
        return total, freqs

    async def window_of(self, reader: _Reader, key: str, session_id: str | None) -> tuple | None:
        """(wid, session_id, cold) of the key's current window, or of `session_id` if it is the key's."""
        if session_id is None:
            rows = await reader.conn.execute_fetchall(
                "SELECT w.wid, w.session_id, w.cold FROM sessions s JOIN windows w ON w.wid = s.current_wid "
                "WHERE s.session_key = ?", (key,))
        else:
            rows = await reader.conn.execute_fetchall(
                "SELECT wid, session_id, cold FROM windows WHERE session_key = ? AND session_id = ?",
                (key, session_id))
        return tuple(rows[0]) if rows else None

    async def windows_of(self, reader: _Reader, key: str) -> list[tuple]:
        """(wid, session_id, cold) of every window of a key, current first, then newest first."""
        rows = await reader.conn.execute_fetchall(
            "SELECT w.wid, w.session_id, w.cold FROM windows w LEFT JOIN sessions s ON s.session_key = w.session_key "
            "WHERE w.session_key = ? ORDER BY (w.wid = s.current_wid) DESC, w.wid DESC", (key,))
        return [tuple(r) for r in rows]

    async def branch_rows(self, reader: _Reader, wid: int) -> list[tuple]:
        """The active branch's structural rows: (seq, event_id, type, role, first_kept_id)."""
        lo, hi = window_range(wid)
        rows = await reader.conn.execute_fetchall(
            "SELECT (id >> 1) & ?, event_id, type, role, "
            "CASE WHEN type = 'reset' THEN json_extract(body, '$.firstKeptEntryId') END "
            "FROM events WHERE id BETWEEN ? AND ? AND on_branch = 1 ORDER BY id", (MAX_SEQ, lo, hi))
        return [tuple(r) for r in rows]

    async def message_rows(self, reader: _Reader, wid: int, seqs: list[int]) -> list[tuple]:
        """(seq, event_id, role, ts, body) of the given seqs, in seq order."""
        out: list[tuple] = []
        lo, _ = window_range(wid)
        for start in range(0, len(seqs), 500):
            chunk = seqs[start:start + 500]
            ids = [lo | (s << 1) | b for s in chunk for b in (0, 1)]
            marks = ",".join("?" * len(ids))
            out += await reader.conn.execute_fetchall(
                f"SELECT (id >> 1) & {MAX_SEQ}, event_id, role, ts, body FROM events WHERE id IN ({marks})", ids)
        return sorted((tuple(r) for r in out), key=lambda r: r[0])

    async def status(self, reader: _Reader) -> dict[str, int]:
        rows = await reader.conn.execute_fetchall(
            "SELECT count(*), sum(needs_rebuild = 0), sum(needs_rebuild), coalesce(sum(messages), 0), "
            "coalesce(sum(CASE WHEN needs_rebuild = 0 THEN messages ELSE 0 END), 0), sum(cold) FROM windows")
        r = rows[0]
        return {"windows": r[0], "indexedWindows": r[1] or 0, "backlog": r[2] or 0, "messages": r[3],
                "indexedMessages": r[4], "coldWindows": r[5] or 0}

    async def index_rows(self, reader: _Reader, wid: int) -> list[int]:
        """Ids of the index rows of a window (for checks and tests)."""
        lo, hi = window_range(wid)
        rows = await reader.conn.execute_fetchall(
            "SELECT rowid FROM msg_fts WHERE rowid BETWEEN ? AND ? ORDER BY rowid", (lo, hi))
        return [r[0] for r in rows]

    async def window_by_session_id(self, reader: _Reader, session_id: str) -> tuple | None:
        rows = await reader.conn.execute_fetchall(
            "SELECT wid, session_key, cold FROM windows WHERE session_id = ?", (session_id,))
        return tuple(rows[0]) if rows else None


class _StaleState(Exception):
    """The cached window state no longer matched the database; reload and retry."""


def _new_session_id() -> str:
    import uuid
    return str(uuid.uuid4())


def _column_value(name: str, value: Any) -> Any:
    if name == "incognito":
        return int(bool(value))
    return value


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
