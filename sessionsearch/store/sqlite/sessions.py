"""`resultMode: "sessions"` on SQLite: the top sessions by their best hits, each with its rows in
scope counted, all in one read snapshot.

Messages mode's exact top hits come first, 4x as many as the sessions wanted: when they hold one
session past the limit (or every match), the sessions' order and best hits are read off them and
only the chosen sessions' matches are counted, text-free. Else (a few sessions holding most of the
matches), or when those top hits would take ranking every match (ties through the bounded sorter's
margin), one aggregate statement ranks every match's session, reading text only for the best hits.
A common word over many sessions costs messages mode plus a small count that way, not the
aggregate's scoring and grouping of every match; a few big sessions cost the aggregate plus one
bounded sorter (bench/bench_sessions.py)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiosqlite

from ..base import RowHit, TopHits
from ..rowids import wid_of, wid_sql
from .fetch import fetch_all
from .scope import id_bounds, range_conditions, scope_arms

HITS_PER_SESSION = 4  # messages mode's top hits read per session wanted

# k -> (meta version, dirty windows, search_top's hits), or None when ranking them would mean
# ranking every match (a tie through its sorter's margin): the aggregate does that for less
TopReader = Callable[..., Awaitable[TopHits | None]]


async def search_sessions(conn: aiosqlite.Connection, head_sql: str, ts_join: str, top_hits: TopReader,
                          match: str | None, *, k: int, order: str, include: list[int] | None,
                          exclude: list[int] | None, role: str | None, since: int | None,
                          until: int | None) -> tuple[int, frozenset[int], list[tuple[Any, ...]]]:
    """(meta version, windows needing reconciliation, top_sessions' rows), read in one snapshot, so
    that a session's count and best hit agree (hits >= 1) and both agree with the dirty windows.
    `top_hits(k=n)`: messages mode's search_top over the same scope, run inside that snapshot."""
    await conn.execute("BEGIN")
    try:
        groups = None
        found = await top_hits(k=HITS_PER_SESSION * k)
        if found is not None:
            version, dirty, hits = found
            groups = await sessions_from_hits(conn, ts_join, hits, HITS_PER_SESSION * k, match, k=k, order=order,
                                              include=include, exclude=exclude, role=role, since=since, until=until)
        if groups is None:
            groups = await top_sessions(conn, match, k=k, order=order, include=include, exclude=exclude,
                                        role=role, since=since, until=until, ts_join=ts_join)
        if found is None:
            (head,) = await fetch_all(conn, head_sql, {"seen": None, "hot_seen": None})
            version, dirty = head[1], frozenset(json.loads(head[3]))
    finally:
        if conn.in_transaction:
            await conn.execute("COMMIT")
    return version, dirty, groups


async def sessions_from_hits(conn: aiosqlite.Connection, ts_join: str, hits: list[RowHit], asked: int,
                             match: str | None, *, k: int, order: str, include: list[int] | None,
                             exclude: list[int] | None, role: str | None, since: int | None,
                             until: int | None) -> list[tuple[Any, ...]] | None:
    """top_sessions' answer from search_top's `hits` (at least the top `asked`, a row id 0 saying
    more matched), or None when they do not settle it: fewer than `k` sessions among the top
    `asked` while more matched.

    A session's best hit is its first in the hits' order, so the first `k` sessions to appear are
    the top `k`; with every match among the hits their counts are read off them too, else one
    statement counts the matches in the chosen sessions' windows (no text, no bm25).
    """
    complete = len(hits) < asked  # search_top returned fewer than asked: every match in scope
    real = [h for h in hits if h[0]]
    keys = dict(await fetch_all(conn,
        "SELECT win.wid, win.session_key FROM json_each(:w) j JOIN windows win ON win.wid = j.value "
        "AND win.cold = 0", {"w": json.dumps(sorted({wid_of(h[0]) for h in real}))}))
    if order == "recent":
        ranked = sorted(real, key=lambda h: (-h[3], h[2], keys.get(wid_of(h[0]), "")))
    else:
        ranked = sorted(real, key=lambda h: (h[1], -h[3], h[2], keys.get(wid_of(h[0]), "")))
    if not complete:
        ranked = ranked[:asked]  # the exact top `asked`: rows past it only tie with the last
    best: dict[str, tuple[Any, ...]] = {}
    counts: dict[str, int] = {}
    for hit in ranked:
        key = keys.get(wid_of(hit[0]))
        if key is not None:  # else a window no longer in the catalog: no hit, as in messages mode
            best.setdefault(key, hit)
            counts[key] = counts.get(key, 0) + 1
    chosen = list(best)[:k]
    if not complete:
        if len(chosen) < k:
            return None
        counts = await count_sessions(conn, ts_join, chosen, match, include=include, exclude=exclude, role=role,
                                      since=since, until=until)
    return [(key, counts[key], best[key]) for key in chosen]


async def count_sessions(conn: aiosqlite.Connection, ts_join: str, chosen: list[str], match: str | None, *,
                         include: list[int] | None, exclude: list[int] | None, role: str | None, since: int | None,
                         until: int | None) -> dict[str, int]:
    """Each chosen session's matches in scope, counted as messages mode would find them: in clean
    hot windows in scope, in range, with their transcript row (the narrow ts index tells)."""
    windows = await fetch_all(conn,
        "SELECT wid FROM windows WHERE cold = 0 AND session_key IN (SELECT value FROM json_each(:keys))",
        {"keys": json.dumps(chosen)})
    inside = set(include) if include is not None else None
    out = set(exclude or ())
    wids = sorted(w for (w,) in windows if (inside is None or w in inside) and w not in out)
    params: dict[str, Any] = {"match": match}
    where = ["msg_fts MATCH :match", *range_conditions(since, until, None, params, "t.ts")]
    scans = " UNION ALL ".join(
        f"SELECT {wid_sql('msg_fts.rowid')} AS wid FROM {source}{ts_join} WHERE {' AND '.join([*scope, *where])}"
        for source, scope in scope_arms(wids, None, role, params))
    return dict(await fetch_all(conn,
        f"SELECT win.session_key, count(*) FROM ({scans}) m JOIN windows win ON win.wid = m.wid GROUP BY 1", params))


async def top_sessions(conn: aiosqlite.Connection, match: str | None, *, k: int, order: str,
                       include: list[int] | None, exclude: list[int] | None, role: str | None,
                       since: int | None, until: int | None, ts_join: str) -> list[tuple[Any, ...]]:
    """The best `k` sessions in scope as (session key, rows matched, best hit), the hit as
    search_top's (id, rank, message id, ts, text); sessions ordered by their best hits (rank or
    newest, then newer, then message id), then by key.

    Rows matching `match`, ranked by bm25 over the whole agent (as search_top).

    Every match in scope is read once for its sort key (bm25, or the timestamp from the narrow
    index for "recent"; no text) and folded into one row per window: its best key and its count.
    Windows then fold into sessions; only the rows holding a chosen session's best key are read
    further, for the tie rule (newer timestamp, then message id), and only the winners' text.
    Windows needing reconciliation, cold windows and rows whose transcript row is gone never count.
    """
    params: dict[str, Any] = {"k": k}
    ranged = since is not None or until is not None
    recent = order == "recent"
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
    rows = await fetch_all(conn,
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
    if recent and rows:
        # bm25 of the best hits only, as search_top's "recent" (`+rowid`: see there)
        scores = dict(await fetch_all(conn,
            "SELECT rowid, bm25(msg_fts) FROM msg_fts WHERE msg_fts MATCH :match "
            "AND +rowid IN (SELECT value FROM json_each(:ids))",
            {"match": match, "ids": json.dumps(list(scores))}))
    return [(key, n, (rid, scores.get(rid, 0.0), mid, ts, text)) for key, n, rid, _, mid, ts, text in rows]
