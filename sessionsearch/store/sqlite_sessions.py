"""`resultMode: "sessions"` on SQLite: per window, how many rows in scope match and which is best.

Every match in scope is ranked (the count needs them all anyway); the best of each window comes
from a window function over them, so only one row per window (and rows tied with it) leaves SQLite.
"""

from __future__ import annotations

import json
from typing import Any

from .rowids import wid_of, wid_sql
from .scope import id_bounds, range_conditions, scope_arms

# rows tied on score and time come back together: the message id, read only for them, decides
_ORDER = {"relevance": "key, ts DESC", "recent": "ts DESC"}


def best_per_window_sql(matches: str, order: str) -> str:
    """A statement over `matches` (a SELECT of id, key, ts: every match in scope, key the bm25 or
    substring rank, lower better) giving per window its best rows, each as (id, key, ts, hits in the
    window, message id, text, NULL); rows tied for best all come."""
    return (f"WITH m AS MATERIALIZED ({matches}), "
            f"g AS MATERIALIZED (SELECT id, key, ts, count(*) OVER w AS n, rank() OVER (w ORDER BY {_ORDER[order]}) "
            f"AS r FROM m WINDOW w AS (PARTITION BY {wid_sql('id')})) "
            "SELECT g.id, g.key, g.ts, g.n, e.event_id, e.text, NULL FROM g JOIN events e ON e.id = g.id WHERE g.r = 1")


def best_rows(rows: list[tuple], order: str) -> list[tuple]:
    """Per window, the one best of `best_per_window_sql`'s rows, as (id, key, message id, ts, text,
    hits): ties broken by message id, as the hit order does."""
    best: dict[int, tuple] = {}
    for rid, key, ts, n, mid, text, _ in rows:
        row = (rid, key, mid, ts, text, n)
        wid = wid_of(rid)
        if wid not in best or _sort(row, order) < _sort(best[wid], order):
            best[wid] = row
    return list(best.values())


def _sort(row: tuple, order: str) -> tuple:
    return (-row[3], row[2]) if order == "recent" else (row[1], -row[3], row[2])


async def sessions_top(conn, match: str, *, order: str, include: list[int] | None, exclude: list[int] | None,
                       role: str | None, since: int | None, until: int | None, head_sql: str, ts_join: str,
                       hot_seen: int | None) -> tuple[int, frozenset[int], list[tuple]]:
    """The meta version, the dirty windows (read in the same statement, so in one snapshot), and
    `best_rows` of the matches in scope, in range, outside windows needing reconciliation."""
    params: dict[str, Any] = {"match": match}
    bounds = await id_bounds(conn, since, until) if since is not None or until is not None else None
    in_range = range_conditions(since, until, bounds, params, "t.ts")
    matches = " UNION ALL ".join(
        f"SELECT msg_fts.rowid AS id, bm25(msg_fts) AS key, t.ts AS ts FROM {source}{ts_join} WHERE "
        f"{' AND '.join(['msg_fts MATCH :match', *where, *in_range])}"
        for source, where in scope_arms(include, exclude, role, params))
    rows = await conn.execute_fetchall(f"{best_per_window_sql(matches, order)} UNION ALL {head_sql}",
                                       {**params, "seen": None, "hot_seen": hot_seen})
    head = rows[-1]  # UNION ALL: the head row comes last
    return head[1], frozenset(json.loads(head[3])), best_rows(rows[:-1], order)
