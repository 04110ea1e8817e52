"""`resultMode: "sessions"` on SQLite: how many rows of each window match."""

from __future__ import annotations

from typing import Any

from ..rowids import wid_sql
from .scope import id_bounds, range_conditions, scope_arms

async def count_matches(conn, match: str, wids: list[int], *, role: str | None, since: int | None,
                        until: int | None, ts_join: str) -> dict[int, int]:
    """How many rows of each window in `wids` match, in the role and the time range, leaving out
    windows needing reconciliation (their rows may be stale). No score is computed, so this reads
    only the doclist (and the timestamps when ranged)."""
    if not wids:
        return {}
    params: dict[str, Any] = {"match": match}
    ranged = since is not None or until is not None
    in_range = range_conditions(since, until, await id_bounds(conn, since, until) if ranged else None, params, "t.ts")
    counts: dict[int, int] = {}
    for source, where in scope_arms(sorted(wids), None, role, params):  # windows needing reconciliation: none
        cond = " AND ".join(["msg_fts MATCH :match", *where, *in_range])
        wid = wid_sql("msg_fts.rowid")
        for w, n in await conn.execute_fetchall(
                f"SELECT {wid}, count(*) FROM {source}{ts_join if ranged else ''} WHERE {cond} GROUP BY 1", params):
            counts[w] = counts.get(w, 0) + n
    return counts
