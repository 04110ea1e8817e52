"""`recent` (newest first) on PostgreSQL without sorting every match, and without an index on
(ano, ts) that tempts the planner into walking every timestamp past a rare word (schema.py).

Each window keeps `ts_max`, a bound on the timestamps of its index rows (migration 3, raised by
a trigger on every insert), as SQLite's windows do (store/sqlite/recent.py). The top k + 1 by
(ts DESC, message id) come from one statement in two steps:

1. The matches in the `walk` windows of highest ts_max, each window's rows read by their id range
   (rowids.py) and tested against the tsquery: T is the (k + 1)-th newest timestamp among them.
   At least k + 1 matches are at least as new as T, so the answer is among the matches with
   ts >= T, and those live in windows whose ts_max >= T.
2. Those windows' rows (both id ranges of each), with ts >= T, sorted.

When step 1 finds fewer than k + 1 (a word too rare for the walk, or a walk of no windows),
every match is sorted as before, found through the GIN index. How many windows to walk is
planned from the counts the store last saw (DfCache): enough rows for about three times k + 1
matches at the word's share, none when that is more than WALK_MAX_ROWS (sorting a rare word's
few matches is cheaper than reading windows that hold none).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..rowids import HIGH, LOW_BITS, SEQ_BITS

if TYPE_CHECKING:
    from .search import DfCache, Query

WALK_MAX_ROWS = 20_000  # index rows step 1 may read; past that, sort every match
WALK_MARGIN = 3.0  # rows enough for this many times k + 1 matches at the word's share
WALK_UNKNOWN = 8  # windows walked for words whose counts the store has not seen

# both id ranges of window `w` (rowids.window_ranges), in SQL
LOW = f"m.id BETWEEN {{w}}.wid << {LOW_BITS} AND ({{w}}.wid << {LOW_BITS}) + {(1 << LOW_BITS) - 1}"
HIGH_RANGE = (f"m.id BETWEEN {HIGH} + ({{w}}.wid << {SEQ_BITS + 1}) "
              f"AND {HIGH} + ({{w}}.wid << {SEQ_BITS + 1}) + {(1 << (SEQ_BITS + 1)) - 1}")


def windows_to_walk(query: "Query", cache: "DfCache", k: int) -> int:
    """Step 1's windows for `query`, from the cached document counts and agent size."""
    if cache.head is None:
        return WALK_UNKNOWN
    rows, windows = cache.head
    if rows <= 0 or windows <= 0:
        return 0
    share = 1.0
    for i in range(len(query.phrases)):
        hit = cache.get(query.params[f"q{i}"])
        if hit is None:
            return WALK_UNKNOWN
        share *= min(1.0, hit[1] / rows)
    if share <= 0.0:
        return 0
    walk_rows = WALK_MARGIN * k / share
    if walk_rows > WALK_MAX_ROWS:
        return 0
    return math.ceil(walk_rows * windows / rows) + 1


def recent_ctes(query: "Query", where: list[str], score: str, walk: int, params: dict) -> str:
    """CTEs ending in `cand`, matching rows (id, s, ts, mid) among which are the top %(k)s newest
    first, `where` holding the scope's conditions on `m` (search.scope_sql), after the CTEs of
    stats_sql."""
    params["walk"] = walk
    cond = " AND ".join([f"m.tsv @@ {query.tsquery}", *where])
    windows = "ano = %(ano)s AND needs_rebuild = 0 AND cold = 0"
    floor = "(SELECT t FROM floor)"
    return (
        f"w1 AS MATERIALIZED (SELECT wid FROM ss_windows WHERE {windows} ORDER BY ts_max DESC LIMIT %(walk)s), "
        f"near AS MATERIALIZED (SELECT m.ts FROM st, w1 CROSS JOIN LATERAL (SELECT * FROM ss_index m "
        f"WHERE {LOW.format(w='w1')}) m WHERE {cond} ORDER BY m.ts DESC LIMIT %(k)s), "
        "floor AS MATERIALIZED (SELECT CASE WHEN count(*) = %(k)s THEN min(ts) END AS t FROM near), "
        f"cand AS (SELECT m.id, {score} AS s, m.ts, m.mid FROM st, ss_windows w2 CROSS JOIN LATERAL "
        f"(SELECT * FROM ss_index m WHERE {LOW.format(w='w2')} UNION ALL "
        f"SELECT * FROM ss_index m WHERE {HIGH_RANGE.format(w='w2')}) m "
        f"WHERE {floor} IS NOT NULL AND w2.{windows.replace(' AND ', ' AND w2.')} AND w2.ts_max >= {floor} "
        f"AND m.ts >= {floor} AND {cond} "
        f"UNION ALL SELECT m.id, {score} AS s, m.ts, m.mid FROM st, ss_index m WHERE {floor} IS NULL AND {cond})")
