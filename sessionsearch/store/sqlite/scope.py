"""A search's scope as SQL on index row ids (rowids.py): the windows in or out, the role bit, and
the windows needing reconciliation, all conditions on `msg_fts.rowid`."""

from __future__ import annotations

import json
from typing import Any

import aiosqlite

from ..rowids import LOW_BITS, LOW_SEQS, wid_sql, window_ranges
from .fetch import fetch_all
from .migrations import SPAN_DIGITS

# One row if a window between :wlo and :whi has rows in the high id region, else none: joined
# first, it keeps FTS5 from opening a cursor on that range at all (a constant WHERE term does not:
# SQLite tests it inside the scan, after FTS5 has looked the words up).
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
            where.append({"low": low, "high": high}.get(region or "", f"({low} OR {high})"))
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


# A time range narrows the scan to the id span of the windows it overlaps (each window's ts_min and
# ts_max bound its messages' timestamps, migrations 10 and 14), which holds every message in it,
# when it spans at most 1/NARROW_SHARE of the agent's time and overlaps at most NARROW_MAX_WINDOWS
# windows (reading them is cheap); the span of a longer one skips few rows (figures:
# docs/architecture/decisions.md).
NARROW_MAX_WINDOWS = 4_096
NARROW_SHARE = 4
SPAN_CLASSES = 16  # a window's span has at most 15 digits (timestamps of years 1 to 9999)

# id_bounds' statement: the agent's time span from migration 13's index (two probes), then the
# windows overlapping the range from migration 14's, one range of it per order of magnitude d of a
# window's span: a window of span < 10^d that overlaps [lo, hi) has lo - 10^d < ts_min < hi (a test
# pins its plan as covering)
ID_BOUNDS_SQL = (
    "WITH span AS MATERIALIZED (SELECT "
    "(SELECT min(ts) FROM events INDEXED BY events_all_by_ts) AS first, "
    "(SELECT max(ts) FROM events INDEXED BY events_all_by_ts) AS last), "
    "r AS MATERIALIZED (SELECT first, last, max(coalesce(:since, first), first) AS lo, "
    "min(coalesce(:until, last + 1), last + 1) AS hi FROM span) "
    "SELECT r.first, r.last, b.* FROM r, (SELECT min(wid), max(wid), count(*), max(last_seq) FROM (SELECT w.wid, "
    "w.last_seq FROM r, (VALUES " + ", ".join(f"({d}, {10 ** d})" for d in range(1, SPAN_CLASSES + 1)) + ") AS c "
    f"CROSS JOIN windows AS w INDEXED BY windows_by_span WHERE {SPAN_DIGITS} = c.column1 "
    "AND w.ts_min > r.lo - c.column2 AND w.ts_min < r.hi AND w.ts_max >= r.lo "
    "AND (r.hi - r.lo) * :share <= r.last + 1 - r.first LIMIT :cap)) AS b")


async def id_bounds(conn: aiosqlite.Connection, since: int | None, until: int | None) -> tuple[int, int] | None:
    """(lo, hi) holding the id of every indexed message with since <= ts < until, (1, 0) when there
    is none, or None when the range is too long to be worth narrowing to. One statement: the time
    span first (two index probes), the windows only for a range short against it.

    The span is that of the windows overlapping the range, whole: reading them costs a tenth of
    reading the ids of the range's events, and for windows written one after another it is the
    events' span but for the two windows at its ends. A window with rows in the high id region
    (rowids.py) is not narrowed to."""
    (first, last, wlo, whi, n, longest), = await fetch_all(conn,
        ID_BOUNDS_SQL, {"since": since, "until": until, "share": NARROW_SHARE, "cap": NARROW_MAX_WINDOWS})
    if first is None:
        return (1, 0)
    lo_ts = first if since is None else max(since, first)
    hi_ts = last + 1 if until is None else min(until, last + 1)
    if lo_ts >= hi_ts:
        return (1, 0)
    if (hi_ts - lo_ts) * NARROW_SHARE > last + 1 - first or n >= NARROW_MAX_WINDOWS:
        return None  # the statement read no windows (too long against the span), or stopped at the cap
    if not n:
        return (1, 0)
    if longest >= LOW_SEQS:
        return None
    return (wlo << LOW_BITS, ((whi + 1) << LOW_BITS) - 1)


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
