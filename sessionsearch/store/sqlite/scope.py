"""A search's scope as SQL on index row ids (rowids.py): the windows in or out, the role bit, and
the windows needing reconciliation, all conditions on `msg_fts.rowid`."""

from __future__ import annotations

import json
from typing import Any

from ..rowids import LOW_SEQS, wid_sql, window_ranges

# One row if a window between :wlo and :whi has rows in the high id region, else none: joined
# first, it keeps FTS5 from opening a cursor on that range at all (a constant WHERE term does not:
# SQLite tests it inside the scan, after FTS5 has looked the words up; 0.3 ms for a 10% word).
LONG_IN_SCOPE = (f"(SELECT 1 WHERE EXISTS (SELECT 1 FROM windows WHERE last_seq >= {LOW_SEQS} "
                 "AND wid BETWEEN :wlo AND :whi)) AS long CROSS JOIN msg_fts")


def scope_conditions(include: list[int] | None, exclude: list[int] | None, role: str | None,
                     params: dict[str, Any], *, dirty: bool = True, region: str | None = None) -> list[str]:
    """Conditions for a scope: windows in or out (as JSON lists), and the role bit.

    `dirty` adds the exclusion of windows needing reconciliation (their rows may be stale). An
    `include` scope is two id ranges: `region` "low" or "high" keeps one, as a range FTS5 can
    push down; None keeps both, which FTS5 cannot (it filters row by row).
    """
    where = []
    wid = wid_sql("msg_fts.rowid")
    if dirty:
        where.append(f"{wid} NOT IN (SELECT wid FROM windows WHERE needs_rebuild = 1)")
    if include is not None:
        if include:
            (lo, _), (hlo, _) = window_ranges(min(include))
            (_, hi), (_, hhi) = window_ranges(max(include))
            params.update(lo=lo, hi=hi, hlo=hlo, hhi=hhi, wlo=min(include), whi=max(include))
            low, high = "msg_fts.rowid BETWEEN :lo AND :hi", "msg_fts.rowid BETWEEN :hlo AND :hhi"
            where.append({"low": low, "high": high}.get(region, f"({low} OR {high})"))
        if not include or max(include) - min(include) + 1 != len(include):  # else the range says it all
            where.append(f"{wid} IN (SELECT value FROM json_each(:incl))")
            params["incl"] = json.dumps(include)
    if exclude:
        where.append(f"{wid} NOT IN (SELECT value FROM json_each(:excl))")
        params["excl"] = json.dumps(exclude)
    if role is not None:
        where.append("(msg_fts.rowid & 1) = :rb")
        params["rb"] = 1 if role == "assistant" else 0
    return where


def scope_arms(include: list[int] | None, exclude: list[int] | None, role: str | None,
               params: dict[str, Any], *, dirty: bool = True) -> list[tuple[str, list[str]]]:
    """(FROM clause, conditions) whose rows together are the scope's rows of msg_fts: the whole
    table, or for a scope of windows its low and its high id range, each pushed down to FTS5 (the
    high one only if a window in scope reaches it)."""
    if not include:
        return [("msg_fts", scope_conditions(include, exclude, role, params, dirty=dirty))]
    return [("msg_fts", scope_conditions(include, exclude, role, params, dirty=dirty, region="low")),
            (LONG_IN_SCOPE, scope_conditions(include, exclude, role, params, dirty=dirty, region="high"))]


# A time range narrows the scan to the id span of its events (found in the events_all_by_ts index,
# migration 13), which holds every message in it, when it is short: it holds at most
# NARROW_MAX_ROWS events and spans at most 1/NARROW_SHARE of the agent's time; reading the span of
# a longer one costs more than the rows it would skip.
NARROW_MAX_ROWS = 20_000
NARROW_SHARE = 20
MAX_ID = (1 << 63) - 1


# id_bounds' statement, read from migration 13's index alone (a test pins its plan as covering)
ID_BOUNDS_SQL = (
    "WITH span AS MATERIALIZED (SELECT "
    "(SELECT min(ts) FROM events INDEXED BY events_all_by_ts) AS first, "
    "(SELECT max(ts) FROM events INDEXED BY events_all_by_ts) AS last), "
    "r AS MATERIALIZED (SELECT first, last, max(coalesce(:since, first), first) AS lo, "
    "min(coalesce(:until, last + 1), last + 1) AS hi FROM span) "
    "SELECT r.first, r.last, b.* FROM r, (SELECT min(id), max(id), count(*) FROM (SELECT e.id FROM r, "
    "events AS e INDEXED BY events_all_by_ts WHERE e.ts >= r.lo AND e.ts < r.hi "
    "AND (r.hi - r.lo) * :share <= r.last + 1 - r.first LIMIT :cap)) AS b")


async def id_bounds(conn, since: int | None, until: int | None) -> tuple[int, int] | None:
    """(lo, hi) holding the id of every indexed message with since <= ts < until, (1, 0) when there
    is no event in range, or None when the range is too long to be worth narrowing to. One
    statement: the time span first (two index probes), the ids only for a range short against it.

    The span and ids are those of every event, messages or not: read from the index alone (a
    covering index; testing `text IS NOT NULL` cost a lookup of each events row, 15-21 ms for a
    range of 7,000-15,000 messages at 1,000,000), and the ids of all events in a range bound
    those of its messages."""
    (first, last, lo, hi, n), = await conn.execute_fetchall(
        ID_BOUNDS_SQL, {"since": since, "until": until, "share": NARROW_SHARE, "cap": NARROW_MAX_ROWS})
    if first is None:
        return (1, 0)
    lo_ts = first if since is None else max(since, first)
    hi_ts = last + 1 if until is None else min(until, last + 1)
    if lo_ts >= hi_ts:
        return (1, 0)
    if (hi_ts - lo_ts) * NARROW_SHARE > last + 1 - first or n >= NARROW_MAX_ROWS:
        return None  # the statement read no ids (too long against the span), or stopped at the cap
    return (lo, hi) if n else (1, 0)


def range_conditions(since: int | None, until: int | None, bounds: tuple[int, int] | None,
                     params: dict[str, Any], ts: str) -> list[str]:
    """Conditions for since <= ts < until on the column `ts`, with the id span FTS5 can push down."""
    where = []
    if bounds is not None:
        params.update(tlo=bounds[0], thi=bounds[1])
        where.append("msg_fts.rowid BETWEEN :tlo AND :thi")
    if since is not None:
        params["since"] = since
        where.append(f"{ts} >= :since")
    if until is not None:
        params["until"] = until
        where.append(f"{ts} < :until")
    return where
