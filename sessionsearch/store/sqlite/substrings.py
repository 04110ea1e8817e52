"""The CJK retry on SQLite: indexed rows in scope holding every CJK word as a literal substring,
read by a scan of the rows the other words match (or of every row in scope)."""

from __future__ import annotations

from typing import Any

from .scope import id_bounds, range_conditions, scope_arms


async def scan_substrings(conn, needles: list[str], match: str | None, *,
                          include: list[int] | None, exclude: list[int] | None, role: str | None,
                          k: int, since: int | None = None, until: int | None = None) -> tuple[int, list[tuple]]:
    """The CJK retry: indexed rows in scope containing every needle as a literal substring.

    Needles are compared with ASCII case folded (CJK has no case). Returns how many rows
    matched and the best `k` as (id, rank, message id, ts, text), rank lower-is-better by
    occurrences per length, then newest first.
    """
    params: dict[str, Any] = {"k": k}
    ranged = since is not None or until is not None
    where = range_conditions(since, until, await id_bounds(conn, since, until) if ranged else None,
                             params, "msg_fts.ts")
    if match:
        where.append("msg_fts MATCH :match")
        params["match"] = match
    counts = []
    for i, needle in enumerate(needles):
        where.append(f"instr(lower(msg_fts.text), :n{i}) > 0")
        counts.append(f"(length(msg_fts.text) - length(replace(lower(msg_fts.text), :n{i}, ''))) / length(:n{i})")
        params[f"n{i}"] = needle.lower()
    occurrences = " + ".join(counts) or "0"
    scans = " UNION ALL ".join(
        f"SELECT msg_fts.rowid AS id, -1000.0 * ({occurrences}) / (length(msg_fts.text) + 100) AS rank, "
        f"msg_fts.ts AS ts, msg_fts.mid AS mid FROM {source} WHERE {' AND '.join([*scope, *where])}"
        for source, scope in scope_arms(include, exclude, role, params))
    rows = await conn.execute_fetchall(
        f"WITH m AS MATERIALIZED ({scans}), "
        "top AS MATERIALIZED (SELECT id, rank, mid, ts FROM m ORDER BY rank, ts DESC, mid LIMIT :k) "
        "SELECT (SELECT count(*) FROM m), NULL, NULL, NULL, NULL "
        "UNION ALL SELECT top.id, top.rank, top.mid, top.ts, f.text FROM top JOIN msg_fts f ON f.rowid = top.id",
        params)
    return rows[0][0], [tuple(r) for r in rows[1:]]

