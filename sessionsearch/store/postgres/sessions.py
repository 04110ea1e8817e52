"""`resultMode: "sessions"` and the CJK substring retry on PostgreSQL, in the search's snapshot.

Every match in scope is scored once (bm25, or minus its timestamp for "recent"); each session
keeps its best row (then newer, then message id) and its count of matches; the best `k` sessions
come back by their best rows, then key. The substring retry is a plain scan of the scope's
indexed rows' text (strpos on the lowered text), ranked as SQLite ranks it: occurrences per length.
"""

from __future__ import annotations

from typing import Any

from ..base import Match
from .db import Reader
from .search import MID, Query, head, scope_sql


def _needle_sql(needles: list[str], params: dict[str, Any]) -> tuple[list[str], str]:
    """Conditions (every needle in the row's text) and the rank (lower is better) of the scan."""
    where, counts = [], []
    for i, needle in enumerate(needles):
        params[f"n{i}"] = needle.lower()
        where.append(f"strpos(lower(e.text), %(n{i})s) > 0")
        counts.append(f"((length(e.text) - length(replace(lower(e.text), %(n{i})s, ''))) / length(%(n{i})s))")
    return where, f"(-1000.0::float8 * ({' + '.join(counts) or '0'}) / (length(e.text) + 100))"


def _matches(match: Match | None, needles: list[str] | None, *, order: str, include, exclude, role, since, until,
             params: dict[str, Any], query: Query | None, dirty: frozenset[int]) -> str:
    """SELECT of every matching row in scope: id, window, shown score, sort key, ts, mid."""
    where = scope_sql(include, exclude, role, since, until, params, dirty)
    join = " JOIN ss_events e ON e.id = m.id" if needles else ""
    if query is not None:
        where.insert(0, f"m.tsv @@ {query.tsquery}")
    if needles:
        conds, score = _needle_sql(needles, params)
        where += conds
    else:
        score = query.score_sql()
    params.update(query.params if query is not None else {})
    key = "(-m.ts)::float8" if order == "recent" else score
    return (f"SELECT m.id, m.wid, {score} AS s, {key} AS r, m.ts, m.mid "
            f"FROM ss_index m{join} WHERE {' AND '.join(where)}")


async def search_sessions(reader: Reader, ano: int, match: Match | None, *, needles: list[str] | None, k: int,
                          order: str, include, exclude, role, since, until) -> tuple[int, frozenset[int], list]:
    params: dict[str, Any] = {"ano": ano, "k": k}
    query = Query(match) if match is not None and match.words else None
    if (query is not None and not query.lexemes) or (query is None and not needles):
        return (*await head(reader, ano), [])
    version, dirty = await query.load_stats(reader, ano) if query is not None else await head(reader, ano)
    scan = _matches(match, needles, order=order, include=include, exclude=exclude, role=role, since=since,
                    until=until, params=params, query=query, dirty=dirty)
    rows = await reader.all(
        f"WITH s AS MATERIALIZED ({scan}), "
        "m AS MATERIALIZED (SELECT s.*, w.session_key AS key FROM s JOIN ss_windows w ON w.wid = s.wid), "
        f"best AS (SELECT DISTINCT ON (key) key, id, s, r, ts, mid FROM m ORDER BY key, r, ts DESC, mid {MID}), "
        "n AS (SELECT key, count(*) AS n FROM m GROUP BY key) "
        "SELECT b.key, n.n, b.id, b.s, e.event_id, e.ts, e.text FROM best b JOIN n ON n.key = b.key "
        f"JOIN ss_events e ON e.id = b.id ORDER BY b.r, b.ts DESC, b.mid {MID}, b.key COLLATE \"C\" LIMIT %(k)s",
        params)
    return version, dirty, [(key, n, (rid, s, mid, ts, text)) for key, n, rid, s, mid, ts, text in rows]


async def scan_substrings(reader: Reader, ano: int, needles: list[str], match: Match | None, *, include, exclude,
                          role, k: int, since, until) -> tuple[int, list[tuple]]:
    """(rows in scope holding every needle, the best `k` as (id, rank, message id, ts, text))."""
    params: dict[str, Any] = {"ano": ano, "k": k}
    query = Query(match) if match is not None and match.words else None
    _, dirty = await head(reader, ano)
    where = scope_sql(include, exclude, role, since, until, params, dirty)
    if query is not None:
        where.insert(0, f"m.tsv @@ {query.tsquery}")
        params.update(query.params)
    conds, rank = _needle_sql(needles, params)
    rows = await reader.all(
        f"WITH s AS MATERIALIZED (SELECT m.id, {rank} AS rank, e.event_id AS mid, e.ts, e.text "
        f"FROM ss_index m JOIN ss_events e ON e.id = m.id "
        f"WHERE {' AND '.join(where + conds)}) "
        f"SELECT (SELECT count(*) FROM s), NULL, NULL, NULL, NULL UNION ALL "
        f"(SELECT id, rank, mid, ts, text FROM s ORDER BY rank, ts DESC, mid {MID} LIMIT %(k)s)", params)
    return rows[0][0], [tuple(r) for r in rows[1:]]
