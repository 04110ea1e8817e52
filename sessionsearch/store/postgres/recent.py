"""`recent` (newest first) on PostgreSQL without sorting every match, and without an index on
(ano, ts) that tempts the planner into walking every timestamp past a rare word (migrations.py).

Each window keeps `ts_max`, a bound on the timestamps of its index rows (migration 3, raised by
a trigger on every insert), as SQLite's windows do (store/sqlite/recent.py). The top k + 1 by
(ts DESC, message id) come from one statement in two steps:

1. A walk of at most `walk` windows by ts_max, newest first, each window's rows read by their id
   range (rowids.py) and tested against the tsquery, until k + 1 matches are found. T is the
   oldest timestamp among those matches: at least k + 1 matches are at least as new as T, so the
   answer is among the matches with ts >= T, and those live in windows whose ts_max >= T.
2. Those windows' rows with ts >= T, sorted (but for the windows step 1 read whole, whose matches
   it holds already).

When the walk stops short of k + 1 matches, every match is sorted as before, found through the
GIN index. The walk's length is planned from the counts the store last saw (DfCache), or for a
word it has not counted, from the counts the statement reads (walk_sql): it reads
rows in id order, several times cheaper than fetching a match through the GIN index, so it may
read a few times as many rows as the word has matches, and is not tried when even its expected
length is more than that (a rare word: sorting its few matches is cheaper than reading windows
without it).

A one-word search first tries the newest rows of the word the last postings build kept
(kept_ctes), in the same statement: they answer when usable and when k + 1 of them (with the rows
written since) are in scope above their floor; else the walk above answers, its CTEs never run.
The walk would read every window newer than the word's newest match first: the kept rows skip
exactly that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..rowids import HIGH, LOW_BITS, LOW_SEQS, SEQ_BITS
from .terms import FRESH_LIMIT, RECENT

if TYPE_CHECKING:
    from .query import DfCache, Query

ROWS_PER_MATCH = 4  # rows a walk may read per match that sorting every match would fetch
WALK_MARGIN = 3  # a walk is expected to need this many times k + 1 over the word's share

# both id ranges of window `w` (rowids.window_ranges), in SQL
LOW = f"m.id BETWEEN {{w}}.wid << {LOW_BITS} AND ({{w}}.wid << {LOW_BITS}) + {(1 << LOW_BITS) - 1}"
HIGH_RANGE = (f"m.id BETWEEN {HIGH} + ({{w}}.wid << {SEQ_BITS + 1}) "
              f"AND {HIGH} + ({{w}}.wid << {SEQ_BITS + 1}) + {(1 << (SEQ_BITS + 1)) - 1}")
WINDOWS = "ano = %(ano)s AND needs_rebuild = 0 AND cold = 0"
ROW = "m.id, m.ano, m.wid, m.ts, m.mid, m.tsv"  # what the walk's conditions and answer read of an index row


def walk_windows(query: Query, cache: DfCache, k: int) -> int | None:
    """Windows step 1 may read for `query` (0: sort every match), from the cached counts; None
    when they are not cached: the statement then plans the walk from the counts it reads (walk_sql)."""
    if cache.head is None:
        return None
    rows, windows = cache.head
    share = 1.0
    for i in range(len(query.phrases)):
        hit = cache.get(query.params[f"q{i}"])
        if hit is None:
            return None
        share *= min(1.0, hit[1] / rows) if rows > 0 else 0.0
    cap = ROWS_PER_MATCH * share * rows
    if share <= 0.0 or WALK_MARGIN * k / share > cap:
        return 0
    return max(1, int(cap * windows / rows))


def walk_sql(query: Query) -> str:
    """walk_windows in SQL, from the counts in `st` (stats_sql) and k + 1 in %(k)s. A word the
    store has not counted yet was walked a fixed 20 windows: for a rare word, rows read without it
    before every match was sorted anyway (the first search of each word, a p95 of `recent`)."""
    share = " * ".join(f"least(1.0::float8, st.df{i}::float8 / st.rows::float8)" for i in range(len(query.phrases)))
    return (f"(SELECT CASE WHEN s.share <= 0.0 THEN 0 "
            f"WHEN {WALK_MARGIN} * %(k)s > {ROWS_PER_MATCH} * s.share * s.share "
            f"* s.rows THEN 0 ELSE greatest(1, floor({ROWS_PER_MATCH} * s.share * s.windows))::integer END "
            f"FROM (SELECT st.rows, st.windows, CASE WHEN st.rows > 0 THEN {share} ELSE 0.0 END AS share FROM st) s)")


def kept_word(query: Query) -> str | None:
    """The word whose newest rows a build may have kept for `query`: one word, not a prefix."""
    if query.prefix or len(query.phrases) != 1 or len(query.phrases[0]) != 1:
        return None
    return query.phrases[0][0]


def kept_ctes(query: Query, where: list[str], walk: int | None, params: dict[str, Any], word: str,
              mark: int | None) -> str:
    """As recent_ctes, from the newest rows of `word` the agent's last build kept (postings_build.py)
    when they settle the answer, else by recent_ctes; `ok` (one row, `kept`) tells which.

    The build (its mark passed as read with the postings' terms: a build since, and the walk
    answers) kept every row of the word newer than a floor (every row, floor NULL). Usable as the
    relevance postings are (postings.py): no row at or below the mark deleted or rewritten since,
    at most FRESH_LIMIT written since. Then the kept rows and those written since holding the word,
    in scope and newer than the floor, are every match in scope newer than the floor: when they
    are k + 1 or more (or the build kept every row), the top k + 1 by (ts DESC, message id) are
    theirs, whatever the order of ties, since every other match is at or below the floor."""
    params.update(rkind=RECENT, rkey=word, rmark=mark, rfresh=FRESH_LIMIT)
    # the kept rows hold the word (a row is never changed in place; one deleted or rewritten since
    # makes the build unusable): not tested again, which would read each row's tsvector
    cond = " AND ".join(where)
    usable = "kb.mark = %(rmark)s AND st.rows - kb.fresh = kb.old_rows AND kb.fresh <= %(rfresh)s"
    return (
        "kb AS MATERIALIZED (SELECT b.mark, b.old_rows, (p.cut ->> 'floor')::bigint AS floor, p.ids, "
        "(SELECT count(*) FROM ss_index f WHERE f.ano = %(ano)s AND f.iseq > %(rmark)s) AS fresh "
        "FROM ss_postings_built b JOIN ss_postings p ON p.ano = b.ano AND p.kind = %(rkind)s AND p.key = %(rkey)s "
        "WHERE b.ano = %(ano)s), "
        f"kc AS MATERIALIZED (SELECT m.id, m.ts, m.mid FROM st, kb CROSS JOIN LATERAL (SELECT unnest(kb.ids) AS id "
        f"UNION SELECT f.id FROM ss_index f WHERE f.ano = %(ano)s AND f.iseq > %(rmark)s "
        f"AND f.tsv @@ {query.tsquery}) c "
        f"JOIN ss_index m ON m.id = c.id WHERE {usable} AND (kb.floor IS NULL OR m.ts > kb.floor) AND {cond}), "
        f"ok AS MATERIALIZED (SELECT coalesce((SELECT {usable} "
        f"AND (kb.floor IS NULL OR (SELECT count(*) FROM kc) >= %(k)s) "
        "FROM st, kb), false) AS kept), "
        + recent_ctes(query, where, walk, params, name="walk")
        + ", cand AS (SELECT id, ts, mid FROM kc WHERE (SELECT kept FROM ok) "
        "UNION ALL SELECT id, ts, mid FROM walk WHERE NOT (SELECT kept FROM ok))")


def recent_ctes(query: Query, where: list[str], walk: int | None, params: dict[str, Any], name: str = "cand") -> str:
    """CTEs ending in `cand` (or `name`), matching rows (id, ts, mid) among which are the top
    %(k)s newest first, `where` holding the scope's conditions on `m` (search.scope_sql), after the
    CTEs of stats_sql; `walk` as walk_windows gives it. Unscored: the caller scores the k it takes."""
    params["walk"] = walk
    limit = "%(walk)s" if walk is not None else walk_sql(query)
    cond = " AND ".join([f"m.tsv @@ {query.tsquery}", *where])
    if walk == 0:  # every match sorted: the walk's CTEs left out, not planned only to be skipped
        return f"{name} AS (SELECT m.id, m.ts, m.mid FROM st, ss_index m WHERE {cond})"
    floor, last = "(SELECT t FROM floor)", "((SELECT wts FROM floor), (SELECT wwid FROM floor))"

    def rows_of(w: str) -> str:  # a window's index rows, both id ranges (the high one only when the
        # window's seqs reach it: a one-time filter), by the primary key alone: OFFSET 0 keeps the
        # word's condition above the scan, else the planner ANDs each window's range with the word's
        # whole GIN posting list, read again for every window
        return (f"((SELECT {ROW} FROM ss_index m WHERE {LOW.format(w=w)} OFFSET 0) UNION ALL "
                f"(SELECT {ROW} FROM ss_index m WHERE {w}.last_seq >= {LOW_SEQS} AND {HIGH_RANGE.format(w=w)} "
                "OFFSET 0)) m")

    # near: no ORDER BY above the join, so the nested loop yields matches window by window in
    # ts_max order and the LIMIT stops it at k + 1 of them (any k + 1 matches make a valid T).
    # The windows before the last one it read were read whole: their matches are all in `near`,
    # and step 2 reads only the last one and those after it with ts_max >= T.
    return (
        f"near AS MATERIALIZED (SELECT m.id, m.ts, w1.ts_max AS wts, w1.wid AS wwid FROM (SELECT wid, ts_max, last_seq "
        f"FROM ss_windows WHERE {WINDOWS} ORDER BY ts_max DESC, wid DESC LIMIT {limit}) w1 CROSS JOIN LATERAL "
        f"(SELECT m.id, m.ts FROM st, {rows_of('w1')} WHERE {cond}) m LIMIT %(k)s), "
        "floor AS MATERIALIZED (SELECT CASE WHEN (SELECT count(*) FROM near) = %(k)s THEN (SELECT min(ts) FROM near) "
        "END AS t, l.wts, l.wwid FROM (SELECT wts, wwid FROM near ORDER BY wts, wwid LIMIT 1) l), "
        f"{name} AS (SELECT m.id, m.ts, m.mid FROM st, ss_windows w2 CROSS JOIN LATERAL {rows_of('w2')} "
        f"WHERE {floor} IS NOT NULL AND w2.{WINDOWS.replace(' AND ', ' AND w2.')} AND w2.ts_max >= {floor} "
        f"AND (w2.ts_max, w2.wid) <= {last} AND m.ts >= {floor} AND {cond} "
        f"UNION ALL SELECT m.id, m.ts, m.mid FROM st, near n JOIN ss_index m ON m.id = n.id "
        f"WHERE {floor} IS NOT NULL AND (n.wts, n.wwid) > {last} "
        f"UNION ALL SELECT m.id, m.ts, m.mid FROM st, ss_index m WHERE {floor} IS NULL AND {cond})")
