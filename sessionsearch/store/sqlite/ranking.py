"""The ranking statement of a search: bounded sorters over FTS5, the rows they show, the head row.

A search ranks with the plain FTS5 scan and a bounded sorter (`ORDER BY key LIMIT k + margin`),
as bare FTS5 would, one sorter per arm of its scope (scope.py), merged here. `recent` without a
time range sorts only the rows a time bound lets through (recent.py), not every match.
"""

from __future__ import annotations

import math
from typing import Any

import aiosqlite

from .fetch import fetch_all
from .recent import SHOWN_COLUMNS, STATE_ROW, ShownIndex, recent_sorter

TIE_MARGIN = 64  # rows kept past the cut so that ties at the cut are usually seen whole

# The timestamps `recent` sorts by, from the narrow index migration 7 made (half the time of the
# FTS5 content rows' ts column); an index row whose transcript row is gone drops out here.
TS_JOIN = " CROSS JOIN events AS t INDEXED BY events_ts ON t.id = msg_fts.rowid AND t.text IS NOT NULL"


async def ranked_shown(conn: aiosqlite.Connection, head_sql: str, head_params: dict[str, Any], k: int, order: str,
                       arms: list[tuple[str, list[str]]], params: dict[str, Any], ranged: bool = False,
                       scores: dict[int, float] | None = None, index: ShownIndex | None = None
                       ) -> tuple[list[tuple[Any, ...]] | None, dict[int, tuple[Any, ...]], tuple[Any, ...] | None]:
    """The ranking (bm25, or newest first for "recent"), what its rows show and the head row,
    in one statement: at least the top `k` as (id, sort value), plus (0, inf) when more matched.

    Each of `arms` (FROM clause, conditions) is ranked by its own bounded sorter; their rows
    are merged here. Returns (top, shown, head); all None/empty when a tie runs through the
    sorter's whole margin (`materialized` then ranks every match, and a second statement reads
    what those rows show). Wrapping the scan in a subquery costs it nothing measurable; the rows
    past the k-th fetch their text too.
    `ranged`: the conditions test `t.ts`, from the narrow index `recent` sorts by (the FTS5
    content rows' ts cost several times as much). `scores`, when given, receives the
    bm25 of every row ranked (for `recent`, which does not sort by it). `index`, when given,
    receives what RecentScores needs of the ranked rows and the index state (recent.py), read in
    the same statement.
    """
    key, direction = ("bm25(msg_fts)", "") if order != "recent" else ("t.ts", " DESC")
    join = TS_JOIN if order == "recent" or ranged else ""
    score = "bm25(msg_fts)" if scores is not None else "NULL"
    params["k2"] = k + TIE_MARGIN
    params["k1"] = k + 1  # recent.py's step 1
    ctes: list[str] = []
    parts: list[str] = []
    for n, (source, where) in enumerate(arms):
        if order == "recent" and not ranged and scores is None:
            cte, sorter = recent_sorter(n, source, where, TS_JOIN)
            ctes.append(cte)
            parts.append(sorter)
        else:
            parts.append(
                f"SELECT * FROM (SELECT msg_fts.rowid AS id, {key} AS key, {score} AS score FROM {source}{join} WHERE "
                f"{' AND '.join(['msg_fts MATCH :match', *where])} ORDER BY {key}{direction} LIMIT :k2)")
    with_ = f"WITH {', '.join(ctes)} " if ctes else ""
    extra, state = ("top.score, NULL", "") if index is None else (SHOWN_COLUMNS, f" UNION ALL {STATE_ROW}")
    rows = await fetch_all(conn,
        f"{with_}SELECT top.id, top.key, e.event_id, e.ts, e.text, {extra} FROM ({' UNION ALL '.join(parts)}) top "
        f"LEFT JOIN events e ON e.id = top.id{state} UNION ALL {head_sql}", {**params, **head_params})
    head = rows[-1]  # UNION ALL: the head row comes last, after the state row if any
    if index is not None:
        _, _, _, _, index.structure, index.averages, index.schema = rows[-2]
        rows = rows[:-1]
        index.rows = {r[0]: (r[5], r[6]) for r in rows[:-1]}
    ranked = sorted(rows[:-1], key=lambda r: r[1], reverse=order == "recent")[:params["k2"]]
    top = cut([(r[0], r[1]) for r in ranked], k)
    if top is None:
        return None, {}, None
    if scores is not None:
        scores.update((r[0], r[5]) for r in ranked)
    # an index row whose transcript row is gone shows nothing, as with the inner join of the
    # second statement (events.ts is never NULL)
    return top, {r[0]: (r[0], r[2], r[3], r[4]) for r in ranked if r[3] is not None}, head


def cut(top: list[tuple[Any, ...]], k: int) -> list[tuple[Any, ...]] | None:
    """A bounded sorter's rows (sorted, at most k + TIE_MARGIN) cut to the top k, the rows tied
    with the k-th, then (0, inf) when more matched; None when a tie runs through the margin."""
    if len(top) == k + TIE_MARGIN and top[k - 1][1] == top[-1][1]:
        return None
    if len(top) <= k:
        return list(top)
    # rows past the k-th only tell that more matched, unless they tie with it
    return list(top[:k]) + [r for r in top[k:] if r[1] == top[k - 1][1]] + [(0, math.inf)]


async def materialized(conn: aiosqlite.Connection, match: str | None, k: int, order: str, where: list[str],
                       params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The top `k` (id, sort value) of every match ranked with the whole tie rule (newer, then
    message id), plus (0, inf): for a tie that ran through the bounded sorter's margin."""
    cond = " AND ".join(["msg_fts MATCH :match", *where])
    params["k"] = k
    if order == "recent":
        sql = (f"WITH m AS MATERIALIZED (SELECT rowid AS id, ts, mid FROM msg_fts WHERE {cond}) "
               "SELECT id, ts FROM m ORDER BY ts DESC, mid LIMIT :k")
    else:
        sql = (f"WITH m AS MATERIALIZED (SELECT rowid AS id, bm25(msg_fts) AS rank, ts, mid FROM msg_fts "
               f"WHERE {cond}) SELECT id, rank FROM m WHERE rank <= "
               "(SELECT rank FROM m ORDER BY rank LIMIT 1 OFFSET :k - 1) ORDER BY rank, ts DESC, mid LIMIT :k")
    return list(await fetch_all(conn, sql, params)) + [(0, math.inf)]
