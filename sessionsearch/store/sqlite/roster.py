"""A roster read on SQLite (store/roster.py): one statement over the agent's sessions table, and of
many agents, their statements on one thread a hop (search_many.hops) merged in the list's order."""

from __future__ import annotations

import heapq
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..records import SessionMeta
from ..roster import Dialect, RosterQuery, roster_chosen, roster_select, roster_where, sort_key
from .search_many import HopStore, hops

ACTIVITY = "max(s.updated_at, coalesce(w.updated_at, 0))"

DIALECT = Dialect(
    param=lambda name: f":{name}",
    # the text's bytes outnumber its characters
    non_ascii=lambda x: f"length(CAST({x} AS BLOB)) <> length({x})",
    in_list=lambda x, p: f"{x} IN (SELECT value FROM json_each({p}))",
    pack=json.dumps,
    activity=ACTIVITY,
    key_order="s.session_key",  # BINARY: UTF-8 bytes, in code point order
)


def roster_sql(q: RosterQuery) -> tuple[str, dict[str, object]]:
    params: dict[str, object] = {}
    where = roster_where(q, DIALECT, params)
    return roster_select(q, DIALECT, "sessions", "windows", where, params), params


def read_roster(conn: sqlite3.Connection, q: RosterQuery) -> list[SessionMeta]:
    """`q`'s sessions of the agent, newest activity first, on the calling thread."""
    sql, params = roster_sql(q)
    return [SessionMeta(*row) for row in conn.execute(sql, params).fetchall()]


def read_keys(conn: sqlite3.Connection, q: RosterQuery) -> tuple[list[str], bool]:
    """The keys `q` selects, or (True) those it does not (incognito ones among them), whichever are
    fewer; on the calling thread."""
    params: dict[str, object] = {}
    chosen, join = roster_chosen(q, DIALECT, "windows", roster_where(q, DIALECT, params))
    rows = conn.execute(
        f"WITH c AS MATERIALIZED (SELECT s.session_key AS key, {chosen} FROM sessions s{join}), "
        "n AS (SELECT coalesce(sum(chosen), 0) * 2 > count(*) AS most FROM c) "
        "SELECT NULL, most FROM n UNION ALL SELECT key, NULL FROM c, n WHERE c.chosen <> n.most", params).fetchall()
    return [row[0] for row in rows[1:]], bool(rows[0][1])


async def read_rosters(stores: Sequence[HopStore], q: RosterQuery, *, deadline: float,
                       at_once: int) -> list[SessionMeta]:
    """`q`'s sessions of every store, in the list's order: each store's statement (at most `q.limit`
    rows), a hop of `at_once` stores on one thread, merged and cut to `q.limit`."""
    def one(store: HopStore, reader: Any, _: None) -> list[SessionMeta]:
        return read_roster(reader.conn._conn, q)  # the borrowed reader's own connection (search_many.py)

    found = await hops(stores, [None] * len(stores), one, deadline=deadline, at_once=at_once)
    if len(found) == 1 or (q.keys_only and q.limit is None):
        return [meta for rows in found for meta in rows]
    merged = heapq.merge(*found, key=sort_key)
    return list(merged) if q.limit is None else [m for m, _ in zip(merged, range(q.limit))]


async def read_keys_each(stores: Sequence[HopStore], q: RosterQuery, *, deadline: float,
                         at_once: int) -> list[tuple[list[str], bool]]:
    """read_keys of each store, a hop of `at_once` stores on one thread."""
    def one(store: HopStore, reader: Any, _: None) -> tuple[list[str], bool]:
        return read_keys(reader.conn._conn, q)

    return await hops(stores, [None] * len(stores), one, deadline=deadline, at_once=at_once)
