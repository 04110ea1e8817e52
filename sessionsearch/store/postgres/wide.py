"""Searches of a query of many words (a pasted paragraph, stack trace or error message) on PostgreSQL:
the same hits, scores and order as search.py's statement, from a statement whose size does not grow
with the words.

search.py writes each phrase into its statement (its df, idf and tf columns, its term of the BM25
sum): for a paragraph of 170 distinct words that is 62 KB of SQL that PostgreSQL takes 150 ms to
plan at any size of agent, and past about 800 phrases more columns than one statement may hold
(1,664). Here the statement is fixed: the phrases' counts come from ss_search_stats with every
argument an array bound whole, the rows are those the whole tsquery matches (the GIN index
intersects the words' entries, its rarest first: the others only filter what they found), and each
matching row comes back with its term counts (tf) and, for a phrase of several lexemes, their
positions. BM25 is then summed here, term by term in FTS5's order, with the idf computed as the
statement computes it (Query.set_stats): the same operations on the same float8 values, so the same
bits. A second statement of the same snapshot reads the shown hits' texts. The cost is the
matches', and a paragraph's rare words leave few.
"""

from __future__ import annotations

import math
from time import monotonic
from typing import Any

from ...errors import SearchTimeout
from .db import Reader
from .query import HEAD_ARGS, HEAD_COLUMNS, DfCache, Query, head_params
from .search import scope_sql
from .terms import K1, B

# Past this many phrases a query is searched here: search.py's statement costs more to plan than
# this one to score (bench/results/long-query.json); up to it nothing changes.
WIDE_PHRASES = 32


def is_wide(q: Query) -> bool:
    return len(q.phrases) > WIDE_PHRASES


def _mid_key(mid: str | None) -> tuple[int, bytes]:
    """A message id in SQLite's order (search.MID): bytes, NULL first."""
    return (0, b"") if mid is None else (1, mid.encode("utf-8"))


class _Scorer:
    """Each phrase's tf in a row, and the row's bm25, as search.py's SQL computes them."""

    def __init__(self, q: Query) -> None:
        self.q = q
        self.idfs = [q.params[f"idf{i}"] for i in range(len(q.phrases))]
        self.avgdl = q.params["avgdl"]

    def tf(self, i: int, tf: dict[str, Any], positions: dict[str, list[int]]) -> float:
        q, phrase = self.q, self.q.phrases[i]
        if q.lone_prefix(i):  # whole numbers: summed in any order, the same float8
            return float(sum(int(n) for lex, n in tf.items() if lex.startswith(phrase[0])))
        if len(phrase) == 1:
            return float(tf.get(phrase[0], 0))
        last = len(phrase) - 1

        def at(j: int) -> set[int]:
            if q.is_prefix(i) and j == last:
                return {p for lex, ps in positions.items() if lex.startswith(phrase[j]) for p in ps}
            return set(positions.get(phrase[j], ()))
        follow = [at(j) for j in range(1, len(phrase))]
        return float(sum(1 for p in positions.get(phrase[0], ())
                         if all(p + j in follow[j - 1] for j in range(1, len(phrase)))))

    def score(self, dl: int, tf: dict[str, Any], positions: dict[str, list[int]] | None) -> float:
        dn = K1 * ((1 - B) + B * float(dl) / self.avgdl)
        total = 0.0
        for i, idf in enumerate(self.idfs):
            t = self.tf(i, tf, positions or {})
            total = total + idf * ((t * (K1 + 1.0)) / (t + dn))
        return -1.0 * total


async def _matches(reader: Reader, ano: int, q: Query, cache: DfCache, *, include: list[int] | None,
                   exclude: list[int] | None, role: str | None, since: int | None, until: int | None,
                   sessions: bool) -> tuple[int, frozenset[int], list[tuple[Any, ...]]]:
    """(meta version, dirty windows, every matching row in scope as (id, score, ts, mid[, session
    key])), in one statement (not the snapshot's last: `_shown` reads the hits' events), its df counts
    kept in `cache`."""
    params: dict[str, Any] = {}
    where = scope_sql(include, exclude, role, since, until, params)
    cached = q.cached_dfs(cache)
    params.update(q.params)
    params.update({"qs": [q.params[f"q{i}"] for i in range(len(q.phrases))],
                   "keys": [q.params[f"p{i}"] for i in range(len(q.phrases))],
                   **{f"c{f}": [c[n] for c in cached] for n, f in enumerate(("", "v", "w", "g", "e"))}})
    params.update(head_params(ano, cache))
    # the positions of the lexemes of phrases of several, for their tf (search.py's _positions)
    several = [i for i, p in enumerate(q.phrases) if len(p) > 1]
    params["plex"] = sorted({lex for i in several for lex in q.phrases[i]})
    params["ppre"] = q.phrases[-1][-1] if several and several[-1] == len(q.phrases) - 1 and q.prefix else None
    positions = ("(SELECT jsonb_object_agg(u.lexeme, u.positions) FROM unnest(m.tsv) u "
                 "WHERE u.lexeme = ANY(%(plex)s::text[]) OR starts_with(u.lexeme, %(ppre)s::text))"
                 if several else "NULL::jsonb")
    key = ", w.session_key" if sessions else ""
    join = " JOIN ss_windows w ON w.wid = m.wid" if sessions else ""
    stats = (f"st AS MATERIALIZED (SELECT f.* FROM ss_search_stats({HEAD_ARGS}, %(qs)s::text[], %(c)s::bigint[], "
             "%(cv)s::bigint[], %(cw)s::bigint[], %(cg)s::numeric[], %(ce)s::bigint[], %(keys)s::text[], "
             "%(fresh_limit)s::bigint) f)")
    rows = await reader.all(
        f"WITH {stats} SELECT {', '.join(f'st.{c}' for c in HEAD_COLUMNS)}, st.dfs, r.* FROM st LEFT JOIN LATERAL ("
        f"SELECT m.id, m.ts, m.mid, m.dl, m.tf, {positions} AS pos{key} FROM ss_index m{join} "
        f"WHERE m.tsv @@ %(q)s::tsquery AND {' AND '.join(where)}) r ON true", params)
    head = rows[0]
    dfs = head[len(HEAD_COLUMNS)]
    version, dirty, _ = q.remember((*head[:len(HEAD_COLUMNS)], *dfs), cache)
    q.set_stats(head[HEAD_COLUMNS.index("rows")] or 0, head[HEAD_COLUMNS.index("tokens")] or 0, dfs)
    scorer = _Scorer(q)
    out = []
    for n, r in enumerate(rows):
        # the one CPU-bound part: a paragraph matching many long rows (a pasted system prompt) is
        # scored within the search's time budget, as its statements are
        if n % 256 == 255 and monotonic() > reader.deadline:
            raise SearchTimeout()
        rid, ts, mid, dl, tf, pos, *rest = r[len(HEAD_COLUMNS) + 1:]
        if rid is None:
            continue
        out.append((rid, scorer.score(dl, tf, pos), ts, mid, *rest))
    return version, dirty, out


async def _shown(reader: Reader, rows: list[tuple[Any, ...]]) -> dict[int, tuple[Any, ...]]:
    """The events of the hits shown (event id, ts, text by row id), the snapshot's last statement:
    texts are read for these rows only, not for every match."""
    found = await reader.all("SELECT e.id, e.event_id, e.ts, e.text FROM ss_events e WHERE e.id = ANY(%s)",
                             ([r[0] for r in rows],), last=True)
    return {r[0]: r[1:] for r in found}


async def wide_top(reader: Reader, ano: int, q: Query, cache: DfCache, *, k: int, order: str, include: list[int] | None,
                   exclude: list[int] | None, role: str | None, since: int | None,
                   until: int | None) -> tuple[int, frozenset[int], list[tuple[Any, ...]]]:
    """search.search_top of a wide query: the top `k` hits (id, bm25, message id, ts, text), then
    (0, inf) when more matched."""
    version, dirty, rows = await _matches(reader, ano, q, cache, include=include, exclude=exclude, role=role,
                                          since=since, until=until, sessions=False)
    if order == "recent":
        rows.sort(key=lambda r: (-r[2], _mid_key(r[3])))
    else:
        rows.sort(key=lambda r: (r[1], -r[2], _mid_key(r[3])))
    shown = await _shown(reader, rows[:k + 1])
    # an index row whose transcript row is gone (an orphan awaiting the sweep) is no hit, as in search.py
    hits: list[tuple[Any, ...]] = [(r[0], r[1], *shown[r[0]]) for r in rows[:k + 1] if r[0] in shown]
    more = len(hits) > k
    hits = hits[:k]
    if more:
        hits.append((0, math.inf, "", 0, ""))
    return version, dirty, hits


async def wide_sessions(reader: Reader, ano: int, q: Query, cache: DfCache, *, k: int, order: str,
                        include: list[int] | None, exclude: list[int] | None, role: str | None, since: int | None,
                        until: int | None) -> tuple[int, frozenset[int], list[Any]]:
    """sessions.search_sessions of a wide query: the best `k` sessions by their best rows, each as
    (key, matches, (id, bm25, message id, ts, text))."""
    version, dirty, rows = await _matches(reader, ano, q, cache, include=include, exclude=exclude, role=role,
                                          since=since, until=until, sessions=True)

    def rank(r: tuple[Any, ...]) -> tuple[Any, ...]:
        return (float(-r[2]) if order == "recent" else r[1], -r[2], _mid_key(r[3]))
    best: dict[str, tuple[Any, ...]] = {}
    count: dict[str, int] = {}
    for r in rows:
        key = r[4]
        count[key] = count.get(key, 0) + 1
        if key not in best or rank(r) < rank(best[key]):
            best[key] = r
    top = sorted(best.items(), key=lambda kv: (rank(kv[1]), kv[0].encode("utf-8")))[:k]
    shown = await _shown(reader, [r for _, r in top])
    return version, dirty, [(key, count[key], (r[0], r[1], *shown[r[0]])) for key, r in top if r[0] in shown]
