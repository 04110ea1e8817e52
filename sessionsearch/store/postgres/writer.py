"""Write transactions of the PostgreSQL store: sessions, windows, appends, delete, archive.

Each public function is the body of one transaction (`Db.tx` runs it). Writers of one session
take its session row first (`FOR UPDATE`), then its window row: concurrent appends to one
session from several processes queue on those locks, and each allocates its seqs from the
window row it holds, so none is lost, duplicated or reordered. Appends to other sessions take
no common row.
"""

from __future__ import annotations

import gzip
import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from ...errors import Conflict, InvalidRequest, NotFound, Unavailable
from ...transcript.append import ids_to_resolve, plan_append
from ...transcript.events import Event
from ..base import EVENT_COLUMNS, AppendResult, session_columns
from ..branch import moved
from ..rowids import MAX_SEQ, MAX_WID, id_sql, row_id, seq_sql, window_ranges
from . import arrays
from .arrays import Int4Array, Int8Array, TextArray
from .db import all_rows, one, the_row
from .lexemes import index_fields, stored_text

INSERT_EVENT = f"INSERT INTO ss_events ({EVENT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
# arrays go in binary: as text, PostgreSQL parsing them cost three times a COPY of the rows
INSERT_INDEX = ("INSERT INTO ss_index (id, ano, wid, ts, mid, dl, tf, tsv) SELECT u.id, %b, u.wid, u.ts, u.mid, u.dl, "
                "u.tf::jsonb, u.tsv::tsvector FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[], %b::text[], "
                "%b::integer[], %b::text[], %b::text[]) AS u(id, wid, ts, mid, dl, tf, tsv)")
INSERT_EVENTS = (f"INSERT INTO ss_events ({EVENT_COLUMNS}) SELECT * FROM unnest(%b::bigint[], %b::bigint[], "
                 "%b::text[], %b::integer[], %b::integer[], %b::text[], %b::text[], %b::bigint[], %b::integer[], "
                 "%b::text[], %b::text[])")
INDEXABLE = "on_branch = 1 AND text IS NOT NULL"
UPDATE_WINDOW = (
    "UPDATE ss_windows SET last_seq = %(last)s, leaf_seq = %(leaf)s, leaf_event_id = %(leaf_id)s, "
    "has_header = %(header)s, messages = messages + %(messages)s, updated_at = coalesce(%(now)s, updated_at), "
    "source_lines = coalesce(%(lines)s, source_lines), idx_rows = idx_rows + %(n)s, "
    "idx_tokens = idx_tokens + %(tokens)s, "
    "needs_rebuild = CASE WHEN %(dirty)s THEN 1 ELSE needs_rebuild END, rebuild_gen = rebuild_gen + %(gen)s, "
    "indexed_seq = CASE WHEN needs_rebuild = 0 AND NOT %(dirty)s THEN %(last)s ELSE indexed_seq END, "
    "indexed_leaf = CASE WHEN needs_rebuild = 0 AND NOT %(dirty)s THEN %(leaf)s ELSE indexed_leaf END, "
    "needs_embed = CASE WHEN %(n)s > 0 THEN 1 ELSE needs_embed END "  # the rows wait for the embed job
    "WHERE wid = %(wid)s RETURNING needs_rebuild")
# the kinds of INSERT_EVENTS' and INSERT_INDEX's arrays (arrays.py)
EVENT_ARRAYS = (Int8Array, Int8Array, TextArray, Int4Array, Int4Array, TextArray, TextArray, Int8Array, Int4Array,
                TextArray, TextArray)
INDEX_ARRAYS = (Int8Array, Int8Array, Int8Array, TextArray, Int4Array, TextArray, TextArray)
TOMBSTONES_KEPT = 20_000
COPY_FROM = 16  # rows from which an insert goes by COPY
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def now_ms() -> int:
    return int(time.time() * 1000)


def index_rows(ano: int, rows: Iterable[tuple[int, int, str, int, str | None]],
               fields: Callable[[str], tuple[int, str, str]] = index_fields,
               ) -> tuple[tuple[str, tuple[Any, ...]], dict[int, list[int]]]:
    """The statement indexing (id, wid, text, ts, mid) rows, and (rows, tokens) it adds per window,
    for their counters. One INSERT of arrays, so that it can go in a pipeline with the statements
    around it (a COPY cannot): a batch of appends or a reconciliation then costs one round trip.
    `fields`: index_fields, or a look-up of what it gave before (an append's, computed unlocked)."""
    ids: list[Any] = []
    wids: list[Any] = []
    tss: list[Any] = []
    mids: list[Any] = []
    dls: list[Any] = []
    tfs: list[Any] = []
    tsvs: list[Any] = []
    counts: dict[int, list[int]] = {}
    for rid, wid, text, ts, mid in rows:
        dl, tf, tsv = fields(text)
        for col, value in ((ids, rid), (wids, wid), (tss, ts), (mids, mid), (dls, dl), (tfs, tf), (tsvs, tsv)):
            col.append(value)
        count = counts.setdefault(wid, [0, 0])
        count[0] += 1
        count[1] += dl
    return (INSERT_INDEX, (ano, *arrays.columns(INDEX_ARRAYS, [ids, wids, tss, mids, dls, tfs, tsvs]))), counts


async def insert_rows(conn: psycopg.AsyncConnection, target: str, insert: str, rows: list[tuple[Any, ...]]) -> None:
    """Insert rows: a few by INSERT, more by COPY (a tenth of the round trips' cost)."""
    if len(rows) <= COPY_FROM:
        if rows:
            async with conn.cursor() as cur:
                await cur.executemany(insert, rows)
        return
    async with conn.cursor() as cur:
        async with cur.copy(f"COPY {target} FROM STDIN") as copy:
            for row in rows:
                await copy.write_row(row)


async def count_index(conn: psycopg.AsyncConnection, wid: int, rows: int, tokens: int) -> None:
    if rows or tokens:
        await conn.execute("UPDATE ss_windows SET idx_rows = idx_rows + %s, idx_tokens = idx_tokens + %s "
                           "WHERE wid = %s", (rows, tokens, wid))


# Delete index rows by id; (rows, tokens) removed per window. The ids are bound as one array:
# planned with its value, the rows are found by primary key (or a hashed filter), never by a join
# whose plan rests on statistics that may predate the rows (reconcile.py, ORPHANS).
DELETE_INDEX = ("WITH d AS (DELETE FROM ss_index WHERE id = ANY(%(ids)s::bigint[]) RETURNING wid, dl) "
                "SELECT wid, count(*), coalesce(sum(dl), 0) FROM d GROUP BY wid")


async def delete_index(conn: psycopg.AsyncConnection, ids: list[int]) -> dict[int, tuple[int, int]]:
    """Delete the index rows `ids`; (rows, tokens) removed per window, counters updated."""
    cur = await conn.execute(DELETE_INDEX, {"ids": ids})
    gone = {wid: (n, int(t)) for wid, n, t in await cur.fetchall()}
    for wid, (n, t) in gone.items():
        await count_index(conn, wid, -n, -t)
    return gone


@dataclass(slots=True)
class _Write:
    """One planned write of rows to a window: its session id, plan, event rows, index-row insert
    (None: none) and the parameters of its window's update (UPDATE_WINDOW)."""

    sid: str
    plan: Any
    rows: list[tuple[Any, ...]]
    insert: tuple[str, tuple[Any, ...]] | None
    update: dict[str, Any]


class Writes:
    """The write transactions of one agent (`ano`); methods take the transaction's connection."""

    def __init__(self, agent_id: str, ano: int) -> None:
        self.agent_id = agent_id
        self.ano = ano

    # -- sessions and windows ----------------------------------------------------------------

    async def _lock_session(self, conn: psycopg.AsyncConnection, key: str) -> tuple[bool, int | None]:
        """Lock the session row, creating it when missing: (created, current wid)."""
        q = "SELECT current_wid FROM ss_sessions WHERE ano = %s AND session_key = %s FOR UPDATE"
        row = await one(conn, q, (self.ano, key))
        if row is not None:
            return False, row[0]
        cur = await conn.execute("INSERT INTO ss_sessions (ano, session_key, updated_at) VALUES (%s, %s, %s) "
                                 "ON CONFLICT DO NOTHING", (self.ano, key, now_ms()))
        created = cur.rowcount > 0
        row = await the_row(conn, q, (self.ano, key))
        return created, row[0]

    async def upsert_session(self, conn: psycopg.AsyncConnection, key: str, fields: dict[str, Any]) -> bool:
        cols = session_columns(fields, now_ms())
        created, _ = await self._lock_session(conn, key)
        sets = ", ".join(f"{col} = %s" for col in cols)
        await conn.execute(f"UPDATE ss_sessions SET {sets} WHERE ano = %s AND session_key = %s",
                           (*cols.values(), self.ano, key))
        session_id = fields.get("sessionId")
        if isinstance(session_id, str) and session_id:
            await self._window_for_write(conn, key, session_id)
        return created

    async def _window_for_write(self, conn: psycopg.AsyncConnection, key: str, session_id: str | None,
                                fields: dict[str, Any] | None = None) -> tuple[Any, ...]:
        """The window a write to `key` goes to, creating session and window as needed, both rows
        locked: (wid, session_id, last_seq, leaf_seq, leaf_event_id, has_header, cold). One round
        trip (`ss_window_for_write`, migration 4), with the session's metadata `fields` set first
        (as upsert_session would) when given."""
        async with conn.pipeline():
            cur = await self._queue_window(conn, key, session_id, fields)
        return self._checked_window(await cur.fetchone(), session_id)

    async def _queue_window(self, conn: psycopg.AsyncConnection, key: str, session_id: str | None,
                            fields: dict[str, Any] | None, now: int | None = None) -> psycopg.AsyncCursor[TupleRow]:
        """_window_for_write's statements, queued in the pipeline `conn` is in; the cursor of its row."""
        if fields is not None:
            cols = session_columns(fields, now_ms())
            await conn.execute("INSERT INTO ss_sessions (ano, session_key, updated_at) VALUES (%s, %s, %s) "
                               "ON CONFLICT DO NOTHING", (self.ano, key, now_ms()))
            await conn.execute(f"UPDATE ss_sessions SET {', '.join(f'{col} = %s' for col in cols)} "
                               "WHERE ano = %s AND session_key = %s", (*cols.values(), self.ano, key))
        return await conn.execute("SELECT * FROM ss_window_for_write(%s, %s, %s, %s, %s)",
                                  (self.ano, key, session_id, str(uuid.uuid4()), now or now_ms()))

    @staticmethod
    def _checked_window(row: tuple[Any, ...] | None, session_id: str | None) -> tuple[Any, ...]:
        assert row is not None  # ss_window_for_write answers one row
        if row[-1]:
            raise Conflict(f"sessionId {session_id!r} belongs to another session key", field="sessionId")
        if row[0] > MAX_WID:  # the ids of its rows would not hold it (rowids.py)
            raise Unavailable(f"this database has used all {MAX_WID} session window numbers")
        return row[:-1]

    async def rotate(self, conn: psycopg.AsyncConnection, key: str, session_id: str | None) -> tuple[str, str | None]:
        row = await one(conn, "SELECT w.session_id FROM ss_sessions s LEFT JOIN ss_windows w ON w.wid = s.current_wid "
                              "WHERE s.ano = %s AND s.session_key = %s FOR UPDATE OF s", (self.ano, key))
        if row is None:
            raise NotFound(f"session {key!r} not found")
        new_id = session_id or str(uuid.uuid4())
        if await one(conn, "SELECT 1 FROM ss_windows WHERE ano = %s AND session_id = %s", (self.ano, new_id)):
            raise Conflict(f"sessionId {new_id!r} already exists", field="sessionId")
        await self._window_for_write(conn, key, new_id)  # a new window, now the session's current one
        return new_id, row[0]

    async def delete_session(self, conn: psycopg.AsyncConnection, key: str) -> bool:
        if await one(conn, "SELECT 1 FROM ss_sessions WHERE ano = %s AND session_key = %s FOR UPDATE",
                     (self.ano, key)) is None:
            return False
        wids = [r[0] for r in await all_rows(conn, "SELECT wid FROM ss_windows WHERE ano = %s AND session_key = %s "
                                                   "ORDER BY wid FOR UPDATE", (self.ano, key))]
        for wid in wids:
            await self._delete_rows(conn, wid)
        await conn.execute("DELETE FROM ss_cold WHERE wid = ANY(%s)", (wids,))
        await conn.execute("DELETE FROM ss_windows WHERE wid = ANY(%s)", (wids,))
        await conn.execute("DELETE FROM ss_sessions WHERE ano = %s AND session_key = %s", (self.ano, key))
        await self._prune_tombstones(conn)
        return True

    async def _delete_rows(self, conn: psycopg.AsyncConnection, wid: int, *, index: bool = True) -> None:
        for lo, hi in window_ranges(wid):
            if index:
                await conn.execute("DELETE FROM ss_index WHERE id BETWEEN %s AND %s", (lo, hi))
                await conn.execute("DELETE FROM ss_embeddings WHERE id BETWEEN %s AND %s", (lo, hi))
            await conn.execute("DELETE FROM ss_events WHERE id BETWEEN %s AND %s", (lo, hi))
        if index:
            await conn.execute("UPDATE ss_windows SET idx_rows = 0, idx_tokens = 0 WHERE wid = %s", (wid,))

    async def _prune_tombstones(self, conn: psycopg.AsyncConnection) -> None:
        row = await one(conn, "SELECT meta_seq FROM ss_deleted WHERE ano = %s ORDER BY meta_seq DESC "
                              "LIMIT 1 OFFSET %s", (self.ano, TOMBSTONES_KEPT))
        if row is None:
            return
        (cut,) = await the_row(conn, "SELECT meta_seq FROM ss_deleted WHERE ano = %s ORDER BY meta_seq DESC "
                                 "LIMIT 1 OFFSET %s", (self.ano, TOMBSTONES_KEPT // 2))
        await conn.execute("DELETE FROM ss_deleted WHERE ano = %s AND meta_seq <= %s", (self.ano, cut))
        await conn.execute("UPDATE ss_agents SET deleted_from = greatest(deleted_from, %s) WHERE ano = %s",
                           (cut, self.ano))

    # -- appends -----------------------------------------------------------------------------

    async def append(self, conn: psycopg.AsyncConnection, key: str, events: list[Event], session_id: str | None,
                     index: bool, source_lines: int | None, fields: dict[str, Any] | None = None) -> AppendResult:
        """Store events (and, `fields`, the session's metadata): two round trips in all, one for
        the window and one pipeline of every write, unless the events leave the linear branch."""
        # tokenized before the window's lock (and, for a new window, the agent's meta stamp) is taken:
        # concurrent appends wait on those until commit, not on this one's Python
        tokenized = {e.text: index_fields(e.text) for e in events if e.text} if index else {}
        window = await self._window_for_write(conn, key, session_id, fields)
        (result,) = await self._write(conn, [await self._planned(conn, key, window, events, source_lines,
                                                                 tokenized if index else None)])
        return result

    async def import_steps(self, conn: psycopg.AsyncConnection, steps: list[tuple[Any, ...]]) -> list[AppendResult]:
        """Import steps (key, fields, events, session_id, lines), unindexed, in this transaction:
        the windows of all of them in one pipeline, then every step's rows (one INSERT) and window
        updates in another. Steps are taken in rounds of distinct sessions and windows, so that a
        window's state is read after an earlier step's rows are in. An import step was two round
        trips of its own, each a wait to be scheduled on a loaded host (docs/performance/postgres.md,
        "Ingest")."""
        out: list[AppendResult] = []
        first = 0
        # an imported session's activity is sessions.json's updatedAt (SPEC §4 activeMinutes), which
        # the metadata upsert sets, never the time of the import: ss_window_for_write stamps a window
        # it creates, and the session, with `created`; both are put back below
        created = now_ms()
        while first < len(steps):
            keys: set[str] = set()
            sids: set[str] = set()
            last = first
            while last < len(steps) and steps[last][0] not in keys and steps[last][3] not in sids:
                keys.add(steps[last][0])
                sids.add(steps[last][3])
                last += 1
            round_ = steps[first:last]
            async with conn.pipeline():
                curs = [await self._queue_window(conn, key, sid,
                                                 None if fields is None else {**fields, "sessionId": sid}, now=created)
                        for key, fields, _, sid, _ in round_]
            windows = [self._checked_window(await cur.fetchone(), sid) for cur, (_, _, _, sid, _) in zip(curs, round_)]
            out += await self._write(conn, [await self._planned(conn, key, window, events, lines, None, imported=True)
                                            for window, (key, _, events, _, lines) in zip(windows, round_)])
            async with conn.pipeline():
                for (key, fields, _, _, _), window in zip(round_, windows, strict=True):
                    await conn.execute("UPDATE ss_windows SET updated_at = 0 WHERE wid = %s AND created_at = %s "
                                       "AND updated_at = %s", (window[0], created, created))
                    at = (fields or {}).get("updatedAt")
                    if isinstance(at, int):
                        await conn.execute("UPDATE ss_sessions SET updated_at = %s WHERE ano = %s AND session_key = %s",
                                           (at, self.ano, key))
            first = last
        return out

    async def _planned(self, conn: psycopg.AsyncConnection, key: str, window: tuple[Any, ...], events: list[Event],
                       source_lines: int | None, tokenized: dict[str, tuple[int, str, str]] | None,
                       imported: bool = False) -> _Write:
        """What storing `events` in `window` (as _window_for_write gave it) writes; `tokenized`:
        their index fields, to index them live (None: unindexed); `imported`: the window's time is
        left as it is (import_steps)."""
        wid, sid, last_seq, leaf_seq, leaf_event_id, has_header, cold = window
        if cold:
            raise Conflict(f"session {key!r} is archived; restore it before appending", field="sessionKey")
        wanted = ids_to_resolve(events, leaf_event_id) if last_seq else None
        known = await self._resolve_ids(conn, wid, wanted) if wanted else {}
        plan = plan_append(events, last_seq=last_seq, leaf_seq=leaf_seq, leaf_event_id=leaf_event_id,
                           has_header=bool(has_header), known=known)
        if plan.last_seq > MAX_SEQ:
            raise InvalidRequest(f"session window {sid!r} is full", field="events")
        live = tokenized is not None and plan.linear
        dirty = bool(plan.rows) and not live
        header = bool(has_header) or any(r.event.type == "session" for r in plan.rows)
        rows = [(row_id(wid, r.seq, r.event.role), wid, r.event.event_id, r.parent_seq, r.node_seq, r.event.type,
                 r.event.role, r.event.ts, int(r.on_branch), r.event.text, r.event.raw or _COMPACT.encode(r.event.body))
                for r in plan.rows]
        insert: tuple[str, tuple[Any, ...]] | None = None
        counts: dict[int, list[int]] = {}
        if live and tokenized is not None:  # live says so: it is given
            insert, counts = index_rows(self.ano, (
                (row[0], wid, row[9], row[7], row[2]) for row, r in zip(rows, plan.rows) if r.on_branch and row[9]),
                tokenized.__getitem__)
        n, tokens = counts.get(wid, (0, 0))
        update = {"last": plan.last_seq, "leaf": plan.leaf_seq, "leaf_id": plan.leaf_event_id, "header": int(header),
                  "messages": plan.messages if plan.linear else 0, "now": None if imported else now_ms(),
                  "lines": source_lines, "n": n,
                  "tokens": tokens, "dirty": dirty, "gen": int(dirty), "wid": wid}
        return _Write(sid, plan, rows, insert if n else None, update)

    async def _write(self, conn: psycopg.AsyncConnection, writes: list[_Write]) -> list[AppendResult]:
        """Store planned writes: their rows in one INSERT, index rows and window updates, in one
        pipeline; then the branch of each window a write left non-linear."""
        columns: list[list[Any]] = [[] for _ in range(11)]
        for w in writes:
            for row in w.rows:
                for col, value in zip(columns, row):
                    col.append(value)
        columns[9] = list(map(stored_text, columns[9]))  # the message text, NUL escaped
        async with conn.pipeline():
            if columns[0]:
                await conn.execute(INSERT_EVENTS, arrays.columns(EVENT_ARRAYS, columns))
            curs = []
            for w in writes:
                if w.insert is not None:
                    await conn.execute(*w.insert)
                curs.append(await conn.execute(UPDATE_WINDOW, w.update))
        out = []
        for w, cur in zip(writes, curs):
            updated = await cur.fetchone()
            assert updated is not None  # the window is locked: its UPDATE returns its row
            (needs,) = updated
            if not w.plan.linear:
                await self._reproject(conn, w.update["wid"], w.plan.leaf_seq)
            out.append(AppendResult(appended=len(w.rows), indexed=w.update["n"], needs_reconcile=bool(needs),
                                    session_id=w.sid, duplicates=w.plan.duplicates,
                                    unknown_parents=w.plan.unknown_parents))
        return out

    async def _resolve_ids(self, conn: psycopg.AsyncConnection, wid: int,
                           ids: Iterable[str]) -> dict[str, tuple[int, int | None]]:
        found: dict[str, tuple[int, int | None]] = {}
        for event_id, seq, node in await all_rows(
                conn, f"SELECT event_id, {seq_sql('id')}, node_seq FROM ss_events "
                      "WHERE wid = %s AND event_id = ANY(%s) ORDER BY id", (wid, list(ids))):
            found.setdefault(event_id, (seq, node))
        return found

    async def _reproject(self, conn: psycopg.AsyncConnection, wid: int, leaf_seq: int | None) -> None:
        """Move the window's active branch to `leaf_seq` (non-linear writes), writing only the rows
        whose place changes (store/branch.py); two round trips whatever the window's size."""
        walked: list[tuple[int, int]] = []
        if leaf_seq is not None:
            leaf, parent = id_sql("%(wid)s::bigint", "%(leaf)s"), id_sql("%(wid)s::bigint", "up.parent")
            walked = await all_rows(
                conn, "WITH RECURSIVE up(id, parent, on_branch) AS (SELECT e.id, e.parent_seq, e.on_branch "
                      f"FROM ss_events e WHERE e.id BETWEEN {leaf} AND {leaf} + 1 UNION ALL "
                      "SELECT e.id, e.parent_seq, e.on_branch FROM up JOIN ss_events e "
                      f"ON e.id BETWEEN {parent} AND {parent} + 1 WHERE up.on_branch = 0 AND up.parent IS NOT NULL) "
                      "SELECT id, on_branch FROM up", {"leaf": leaf_seq, "wid": wid})
        move = moved(wid, walked)
        leaving = " OR ".join("id BETWEEN %s AND %s" for _ in move.leaving)
        # the window's message count moves by the indexable rows that joined and left (INDEXABLE)
        await conn.execute(
            f"WITH gone AS (UPDATE ss_events SET on_branch = 0 WHERE ({leaving}) AND on_branch = 1 "
            "RETURNING text IS NOT NULL AS m), came AS (UPDATE ss_events SET on_branch = 1 "
            "WHERE id = ANY(%s::bigint[]) AND on_branch = 0 RETURNING text IS NOT NULL AS m) "
            "UPDATE ss_windows SET messages = messages - (SELECT count(*) FILTER (WHERE m) FROM gone) "
            "+ (SELECT count(*) FILTER (WHERE m) FROM came) WHERE wid = %s",
            (*[v for r in move.leaving for v in r], move.joining, wid))

    async def import_step(self, conn: psycopg.AsyncConnection, key: str, fields: dict[str, Any] | None,
                          events: list[Event], session_id: str, lines: int) -> AppendResult:
        (result,) = await self.import_steps(conn, [(key, fields, events, session_id, lines)])
        return result

    # -- archive -----------------------------------------------------------------------------

    async def archive(self, conn: psycopg.AsyncConnection, key: str) -> int:
        """Move a session's windows into ss_cold (gzip'd JSON lines) and out of the index."""
        if await one(conn, "SELECT 1 FROM ss_sessions WHERE ano = %s AND session_key = %s FOR UPDATE",
                     (self.ano, key)) is None:
            raise NotFound(f"session {key!r} not found")
        wids = [r[0] for r in await all_rows(conn, "SELECT wid FROM ss_windows WHERE ano = %s AND session_key = %s "
                                                   "AND cold = 0 ORDER BY wid FOR UPDATE", (self.ano, key))]
        for wid in wids:
            lines = []
            for lo, hi in window_ranges(wid):
                for row in await all_rows(conn, f"SELECT {EVENT_COLUMNS} FROM ss_events WHERE id BETWEEN %s AND %s "
                                                "ORDER BY id", (lo, hi)):
                    lines.append(json.dumps(list(row), ensure_ascii=False))
            data = gzip.compress(("\n".join(lines) + "\n").encode("utf-8") if lines else b"")
            await conn.execute("INSERT INTO ss_cold (wid, data) VALUES (%s, %s) ON CONFLICT (wid) DO UPDATE "
                               "SET data = EXCLUDED.data", (wid, data))
            await self._delete_rows(conn, wid)
            await conn.execute("UPDATE ss_windows SET cold = 1 WHERE wid = %s", (wid,))
        await conn.execute("UPDATE ss_sessions SET archived_at = %s WHERE ano = %s AND session_key = %s",
                           (now_ms(), self.ano, key))
        return len(wids)

    async def restore(self, conn: psycopg.AsyncConnection, key: str) -> list[int]:
        """Bring a session's cold windows back; they need reconciliation to be searchable again."""
        if await one(conn, "SELECT 1 FROM ss_sessions WHERE ano = %s AND session_key = %s FOR UPDATE",
                     (self.ano, key)) is None:
            raise NotFound(f"session {key!r} not found")
        wids = [r[0] for r in await all_rows(conn, "SELECT wid FROM ss_windows WHERE ano = %s AND session_key = %s "
                                                   "AND cold = 1 ORDER BY wid FOR UPDATE", (self.ano, key))]
        for wid in wids:
            await self._delete_rows(conn, wid, index=False)
            row = await one(conn, "DELETE FROM ss_cold WHERE wid = %s RETURNING data", (wid,))
            if row is not None and row[0]:
                rows = [tuple(json.loads(line)) for line in gzip.decompress(row[0]).decode("utf-8").splitlines()
                        if line]
                await insert_rows(conn, f"ss_events ({EVENT_COLUMNS})", INSERT_EVENT, rows)
            await conn.execute("UPDATE ss_windows SET cold = 0, needs_rebuild = 1, rebuild_gen = rebuild_gen + 1 "
                               "WHERE wid = %s", (wid,))
        await conn.execute("UPDATE ss_sessions SET archived_at = NULL WHERE ano = %s AND session_key = %s",
                           (self.ano, key))
        return wids
