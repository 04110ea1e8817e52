"""`resultMode: "sessions"` on PostgreSQL, in one statement (search.py's statistics CTEs first).

Every match in scope is scored once (bm25, or minus its timestamp for "recent"); each session
keeps its best row (then newer, then message id) and its count of matches; the best `k` sessions
come back by their best rows, then key.
"""

from __future__ import annotations

from typing import Any

from ..base import Match
from .db import Reader
from .query import HEAD, HEAD_COLUMNS, MID, DfCache, Query, head_params
from .search import scope_sql


def _matches(query: Query, *, order: str, include: list[int] | None, exclude: list[int] | None, role: str | None,
             since: int | None, until: int | None, params: dict[str, Any]) -> str:
    """SELECT of every matching row in scope: id, window, shown score, sort key, ts, mid."""
    where = [f"m.tsv @@ {query.tsquery}", *scope_sql(include, exclude, role, since, until, params)]
    score = query.score_sql()
    rows = query.terms_sql(f"st, ss_index m WHERE {' AND '.join(where)}", "m.id, m.wid, m.ts, m.mid")
    params.update(query.params)
    key = "(-m.ts)::float8" if order == "recent" else score
    return f"SELECT m.id, m.wid, {score} AS s, {key} AS r, m.ts, m.mid FROM st, {rows}"


async def search_sessions(reader: Reader, ano: int, match: Match | None, cache: DfCache, *, k: int, order: str,
                          include: list[int] | None, exclude: list[int] | None, role: str | None, since: int | None,
                          until: int | None) -> tuple[int, frozenset[int], list[Any]]:
    params: dict[str, Any] = {"ano": ano, "k": k}
    query = Query(match) if match is not None and match.words else None
    if query is None or not query.lexemes:
        row = await reader.row(HEAD, head_params(ano, cache), last=True)
        head = dict(zip(HEAD_COLUMNS, row))
        cache.keep_head(head)
        return head["version"], frozenset(head["dirty"]), []
    scan = _matches(query, order=order, include=include, exclude=exclude, role=role, since=since, until=until,
                    params=params)
    stats = query.stats_sql(ano, cache)
    params.update(query.params)
    rows = await reader.all(
        f"WITH {stats}, s AS MATERIALIZED ({scan}), "
        "m AS MATERIALIZED (SELECT s.*, w.session_key AS key FROM s JOIN ss_windows w ON w.wid = s.wid), "
        f"best AS (SELECT DISTINCT ON (key) key, id, s, r, ts, mid FROM m ORDER BY key, r, ts DESC, mid {MID}), "
        "n AS (SELECT key, count(*) AS n FROM m GROUP BY key) "
        f"SELECT {query.stats_columns()}, g.* FROM st LEFT JOIN LATERAL ("
        "SELECT b.key, n.n, b.id, b.s, e.event_id, e.ts, e.text, b.r, b.ts AS bts, b.mid FROM best b "
        "JOIN n ON n.key = b.key JOIN ss_events e ON e.id = b.id) g ON true "
        f"ORDER BY g.r, g.bts DESC, g.mid {MID}, g.key COLLATE \"C\" LIMIT %(k)s", params, last=True)
    version, dirty, _ = query.remember(rows[0], cache)
    found = [r[-10:-3] for r in rows if r[-10] is not None]
    return version, dirty, [(key, n, (rid, s, mid, ts, text)) for key, n, rid, s, mid, ts, text in found]
