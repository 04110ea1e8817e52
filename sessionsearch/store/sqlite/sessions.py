"""`resultMode: "sessions"` on SQLite: the top sessions by their best hits, each with its rows in
scope counted, in one statement that reads message text only for the best hits it returns."""

from __future__ import annotations

import json
from typing import Any

from ..rowids import wid_sql
from .scope import id_bounds, range_conditions, scope_arms


async def search_sessions(conn, head_sql: str, ts_join: str, match: str | None, needles: list[str] | None, *,
                          k: int, order: str, include: list[int] | None, exclude: list[int] | None,
                          role: str | None, since: int | None, until: int | None
                          ) -> tuple[int, frozenset[int], list[tuple]]:
    """(meta version, windows needing reconciliation, top_sessions), read in one snapshot, so that
    a session's count and best hit agree (hits >= 1) and both agree with the dirty windows."""
    await conn.execute("BEGIN")
    try:
        groups = await top_sessions(conn, match, needles, k=k, order=order, include=include, exclude=exclude,
                                    role=role, since=since, until=until, ts_join=ts_join)
        (head,) = await conn.execute_fetchall(head_sql, {"seen": None, "hot_seen": None})
    finally:
        if conn.in_transaction:
            await conn.execute("COMMIT")
    return head[1], frozenset(json.loads(head[3])), groups


async def top_sessions(conn, match: str | None, needles: list[str] | None, *, k: int, order: str,
                       include: list[int] | None, exclude: list[int] | None, role: str | None,
                       since: int | None, until: int | None, ts_join: str) -> list[tuple]:
    """The best `k` sessions in scope as (session key, rows matched, best hit), the hit as
    search_top's (id, rank, message id, ts, text); sessions ordered by their best hits (rank or
    newest, then newer, then message id), then by key.

    `needles` None: rows matching `match`, ranked by bm25 over the whole agent (as search_top).
    Else the CJK retry: rows in scope holding every needle as a literal substring (and matching
    `match` when given), ranked by occurrences per length (as substrings.py).

    Every match in scope is read once for its sort key (bm25, or the timestamp from the narrow
    index for "recent"; no text) and folded into one row per window: its best key and its count.
    Windows then fold into sessions; only the rows holding a chosen session's best key are read
    further, for the tie rule (newer timestamp, then message id), and only the winners' text.
    Windows needing reconciliation, cold windows and rows whose transcript row is gone never count.
    """
    params: dict[str, Any] = {"k": k}
    ranged = since is not None or until is not None
    recent = order == "recent"
    if needles:
        where = range_conditions(since, until, await id_bounds(conn, since, until) if ranged else None,
                                 params, "msg_fts.ts")
        if match:
            where.append("msg_fts MATCH :match")
            params["match"] = match
        counts = []
        for i, needle in enumerate(needles):
            where.append(f"instr(lower(msg_fts.text), :n{i}) > 0")
            counts.append(f"(length(msg_fts.text) - length(replace(lower(msg_fts.text), :n{i}, ''))) "
                          f"/ length(:n{i})")
            params[f"n{i}"] = needle.lower()
        score = f"-1000.0 * ({' + '.join(counts)}) / (length(msg_fts.text) + 100)"
        key, join = ("-msg_fts.ts" if recent else score), ""
    else:
        where = range_conditions(since, until, await id_bounds(conn, since, until) if ranged else None,
                                 params, "t.ts")
        where.append("msg_fts MATCH :match")
        params["match"] = match
        # "recent" scores only the rows it shows, afterwards: bm25 for every match costs a lookup each
        score = "NULL" if recent else "bm25(msg_fts)"
        key, join = ("-t.ts" if recent else score), (ts_join if recent or ranged else "")
    scans = " UNION ALL ".join(
        f"SELECT msg_fts.rowid AS id, {wid_sql('msg_fts.rowid')} AS wid, {key} AS r, {score} AS s "
        f"FROM {source}{join} WHERE {' AND '.join([*scope, *where])}"
        for source, scope in scope_arms(include, exclude, role, params))
    # r: the sort key, lower is better (bm25, or minus the timestamp); s: the score a hit shows
    rows = await conn.execute_fetchall(
        f"WITH m AS MATERIALIZED ({scans}), "
        "w AS MATERIALIZED (SELECT wid, min(r) AS r, count(*) AS n FROM m GROUP BY wid), "
        "s AS MATERIALIZED (SELECT win.session_key AS key, min(w.r) AS r, sum(w.n) AS n FROM w "
        "JOIN windows win ON win.wid = w.wid AND win.cold = 0 GROUP BY 1), "
        # the sessions whose best key is at most the k-th best: the top k by the whole rule are among them
        "c AS MATERIALIZED (SELECT key, r, n FROM s WHERE r <= "
        "coalesce((SELECT r FROM s ORDER BY r LIMIT 1 OFFSET :k - 1), 9e999)), "
        "cw AS MATERIALIZED (SELECT c.key, c.n, w.wid, c.r FROM c JOIN windows win ON win.session_key = c.key "
        "AND win.cold = 0 JOIN w ON w.wid = win.wid AND w.r = c.r), "
        "b AS MATERIALIZED (SELECT cw.key, cw.n, m.id, m.r, m.s, e.ts, e.event_id AS mid, "
        "row_number() OVER (PARTITION BY cw.key ORDER BY e.ts DESC, e.event_id) AS nth "
        "FROM cw JOIN m ON m.wid = cw.wid AND m.r = cw.r JOIN events e ON e.id = m.id) "
        "SELECT b.key, b.n, b.id, b.s, b.mid, b.ts, e.text FROM b JOIN events e ON e.id = b.id "
        "WHERE b.nth = 1 ORDER BY b.r, b.ts DESC, b.mid, b.key LIMIT :k", params)
    scores = {r[2]: r[3] for r in rows}
    if recent and not needles and rows:
        # bm25 of the best hits only, as search_top's "recent" (`+rowid`: see there)
        scores = dict(await conn.execute_fetchall(
            "SELECT rowid, bm25(msg_fts) FROM msg_fts WHERE msg_fts MATCH :match "
            "AND +rowid IN (SELECT value FROM json_each(:ids))",
            {"match": match, "ids": json.dumps(list(scores))}))
    return [(key, n, (rid, scores.get(rid, 0.0), mid, ts, text)) for key, n, rid, _, mid, ts, text in rows]
