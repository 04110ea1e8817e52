"""Catalog and transcript reads of one agent on PostgreSQL, through a reader's snapshot."""

from __future__ import annotations

from typing import Any

from ..base import SessionMeta, WindowMeta
from ..rowids import row_id, seq_sql, window_ranges
from .db import Reader

# a session's latest activity: its metadata or its current window's last append
ACTIVITY = ("greatest(s.updated_at, coalesce(w.updated_at, 0)) "
            "FROM ss_sessions s LEFT JOIN ss_windows w ON w.wid = s.current_wid")
SESSION_COLUMNS = ("SELECT s.session_key, w.session_id, s.label, s.display_name, s.spawned_by, "
                   f"s.parent_session_key, s.kind, s.grp, s.incognito, s.archived_at, {ACTIVITY}")


async def meta_version(reader: Reader, ano: int) -> int:
    version: int = (await reader.row("SELECT meta_version FROM ss_agents WHERE ano = %s", (ano,)))[0]
    return version


async def meta_snapshot(reader: Reader, ano: int, since: int | None
                        ) -> tuple[int, bool, list[SessionMeta], list[WindowMeta], list[str], list[int]]:
    """(version, whole, sessions, windows, deleted keys, deleted wids), one snapshot: see base.py."""
    version, horizon = await reader.row("SELECT meta_version, deleted_from FROM ss_agents WHERE ano = %s", (ano,))
    if since is not None and since >= horizon:
        sessions = await reader.all(f"{SESSION_COLUMNS} WHERE s.ano = %s AND s.meta_seq > %s", (ano, since))
        windows = await reader.all("SELECT wid, session_key, session_id, cold FROM ss_windows "
                                   "WHERE ano = %s AND meta_seq > %s", (ano, since))
        gone = await reader.all("SELECT kind, name FROM ss_deleted WHERE ano = %s AND meta_seq > %s", (ano, since))
        return (version, False, [SessionMeta(*r) for r in sessions], [WindowMeta(*r) for r in windows],
                [name for kind, name in gone if kind == "session"],
                [int(name) for kind, name in gone if kind == "window"])
    sessions = await reader.all(f"{SESSION_COLUMNS} WHERE s.ano = %s", (ano,))
    windows = await reader.all("SELECT wid, session_key, session_id, cold FROM ss_windows WHERE ano = %s", (ano,))
    return version, True, [SessionMeta(*r) for r in sessions], [WindowMeta(*r) for r in windows], [], []


async def window_of(reader: Reader, ano: int, key: str, session_id: str | None) -> tuple[Any, ...] | None:
    if session_id is None:
        row = await reader.one("SELECT w.wid, w.session_id, w.cold FROM ss_sessions s JOIN ss_windows w "
                               "ON w.wid = s.current_wid WHERE s.ano = %s AND s.session_key = %s", (ano, key))
    else:
        row = await reader.one("SELECT wid, session_id, cold FROM ss_windows WHERE ano = %s AND session_key = %s "
                               "AND session_id = %s", (ano, key, session_id))
    return tuple(row) if row else None


async def windows_of(reader: Reader, ano: int, key: str) -> list[tuple[Any, ...]]:
    rows = await reader.all(
        "SELECT w.wid, w.session_id, w.cold FROM ss_windows w LEFT JOIN ss_sessions s ON s.ano = w.ano "
        "AND s.session_key = w.session_key WHERE w.ano = %s AND w.session_key = %s "
        "ORDER BY (w.wid = s.current_wid) IS TRUE DESC, w.wid DESC", (ano, key))
    return [tuple(r) for r in rows]


async def branch_rows(reader: Reader, wid: int) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for lo, hi in window_ranges(wid):
        rows += await reader.all(
            f"SELECT {seq_sql('id')}, event_id, type, role, "
            "CASE WHEN type = 'reset' THEN body::jsonb ->> 'firstKeptEntryId' END "
            "FROM ss_events WHERE id BETWEEN %s AND %s AND on_branch = 1 ORDER BY id", (lo, hi))
    return [tuple(r) for r in rows]


async def message_rows(reader: Reader, wid: int, seqs: list[int]) -> list[tuple[Any, ...]]:
    ids = [row_id(wid, s, role) for s in seqs for role in (None, "assistant")]
    rows = await reader.all(f"SELECT {seq_sql('id')}, event_id, role, ts, body FROM ss_events "
                            "WHERE id = ANY(%s) ORDER BY id", (ids,))
    return sorted((tuple(r) for r in rows), key=lambda r: r[0])


async def activity(reader: Reader, ano: int) -> tuple[int, dict[str, int]]:
    version = await meta_version(reader, ano)
    rows = await reader.all(f"SELECT s.session_key, {ACTIVITY} WHERE s.ano = %s", (ano,))
    return version, dict(rows)


async def status(reader: Reader, ano: int) -> dict[str, int]:
    r = await reader.row(
        "SELECT count(*), count(*) FILTER (WHERE needs_rebuild = 0), coalesce(sum(needs_rebuild), 0), "
        "coalesce(sum(messages), 0), coalesce(sum(messages) FILTER (WHERE needs_rebuild = 0), 0), "
        "coalesce(sum(cold), 0) FROM ss_windows WHERE ano = %s", (ano,))
    return {"windows": r[0], "indexedWindows": r[1], "backlog": int(r[2]), "messages": int(r[3]),
            "indexedMessages": int(r[4]), "coldWindows": int(r[5])}


async def index_rows(reader: Reader, wid: int) -> list[int]:
    return [r[0] for r in await reader.all("SELECT id FROM ss_index WHERE wid = %s ORDER BY id", (wid,))]
