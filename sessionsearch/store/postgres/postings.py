"""Exact BM25 top hits of a one-word search, or a one-word 1-8 letter prefix search, from postings
(postings_build.py) instead of scoring every row that holds the word.

With one term, BM25 depends on a row only through the term's frequency in it (tf) and the row's
length (dl): the IDF is a positive factor common to every row, and at a fixed tf the score falls
as dl grows. So within a run of equal tf the shortest rows are the best; a build keeps the
shortest rows of each run, and for each run cut short the length of its first row left out,
which bounds the score of every row left out of it.

A search takes the postings when the agent's build is usable: no row at or below its mark was
deleted or rewritten since (the agent's indexed rows, by the window counters, are the build's
plus those numbered above the mark), and at most FRESH_LIMIT rows (PREFIX_FRESH_LIMIT for a
prefix) were written since. The term's document count is then the build's plus the fresh rows
holding it, counted from the GIN index in this search's snapshot, so the IDF and average length
are exactly the slow path's. The kept rows best by score (computed here, only to choose them)
and every fresh row holding the term are then scored by the slow path's own SQL expression in the
search's scope and ordered as it orders; the answer stands when every row not scored (kept rows
not taken, runs cut short) scores below the k-th by a margin far above rounding. Else more kept
rows are taken, a few rounds, and past them, or when the postings cannot tell, the caller
searches the slow way (search.py).
"""

from __future__ import annotations

import math
from typing import Any

from .db import Reader
from .query import HEAD, HEAD_COLUMNS, MID, DfCache, Query, head_params
from .search import has_postings, scope_sql
from .terms import FRESH_LIMIT, K1, PREFIX, PREFIX_FRESH_LIMIT, WORD, B, is_prefix_key

EPS = 1e-9  # relative; far above the rounding difference between this score and the SQL's
MAX_ROUNDS = 3  # rounds of taking more kept rows before a narrow scope goes the slow way


def postings_key(q: Query) -> tuple[int, str] | None:
    """(kind, key) of a query the postings can answer: one lexeme, or one 1-8 letter prefix."""
    if len(q.phrases) != 1 or len(q.phrases[0]) != 1:
        return None
    lex = q.phrases[0][0]
    if q.prefix:
        return (PREFIX, lex) if is_prefix_key(lex) else None
    return WORD, lex


async def postings_top(reader: Reader, ano: int, q: Query, cache: DfCache, *, k: int, include: list[int] | None,
                       exclude: list[int] | None, role: str | None, since: int | None,
                       until: int | None) -> tuple[int, frozenset[int], list[tuple[Any, ...]]] | None:
    """As search.search_top for relevance order, from postings; None: search the slow way."""
    key = postings_key(q)
    if key is None or not await has_postings(reader, ano, key, cache):
        return None
    row = await reader.one("SELECT b.mark, b.old_rows, p.docs, p.cut, p.ids, p.tfs, p.dls FROM ss_postings_built b "
                           "JOIN ss_postings p ON p.ano = b.ano AND p.kind = %s AND p.key = %s WHERE b.ano = %s",
                           (*key, ano))
    if row is None:
        return None
    mark, old_rows, docs, cut, ids, tfs, dls = row
    params: dict[str, Any] = {**q.params, **head_params(ano, cache), "mark": mark}
    stats = await reader.row(
        "SELECT h.*, (SELECT count(*) FROM ss_index f WHERE f.ano = %(ano)s AND f.iseq > %(mark)s), "
        "(SELECT count(*) FROM ss_index f WHERE f.ano = %(ano)s AND f.iseq > %(mark)s AND f.tsv @@ %(q)s::tsquery) "
        f"FROM ({HEAD}) h", params)
    head = dict(zip(HEAD_COLUMNS, stats))
    cache.keep_head(head)
    version, dirty, n_rows, n_tokens = head["version"], head["dirty"], head["rows"], head["tokens"]
    fresh, fresh_docs = stats[len(HEAD_COLUMNS):]
    limit = PREFIX_FRESH_LIMIT if key[0] == PREFIX else FRESH_LIMIT
    if n_rows - fresh != old_rows or fresh > limit:
        return None  # rows the build counted are gone, or too many were written since
    dirty = frozenset(dirty)
    q.set_stats(n_rows, n_tokens, [docs + fresh_docs])
    params.update(q.params)
    avgdl, idf = q.params["avgdl"], q.params["idf0"]

    def bm25(tf: int, dl: int) -> float:
        score: float = -1.0 * (idf * ((tf * (K1 + 1.0)) / (tf + K1 * (1 - B + B * dl / avgdl))))
        return score

    kept = sorted((bm25(tf, dl), rid) for rid, tf, dl in zip(ids, tfs, dls))
    left_out = min((bm25(int(tf), dl) for tf, dl in cut.items()), default=math.inf)  # the best row not kept
    where = scope_sql(include, exclude, role, since, until, params)
    score = q.score_sql()
    scored = q.terms_sql(
        f"st, ss_index m WHERE m.id IN (SELECT unnest(%(ids)s::bigint[]) UNION ALL SELECT f.id FROM ss_index f "
        f"WHERE f.ano = %(ano)s AND f.iseq > %(mark)s AND f.tsv @@ {q.tsquery}) AND m.tsv @@ {q.tsquery} "
        f"AND {' AND '.join(where)}")
    # the statistics the slow path's `st` holds (search.py), here as values
    params.update(q.params, k=k + 1, dirty=sorted(dirty))
    st = "st AS (SELECT %(dirty)s::bigint[] AS dirty, %(avgdl)s::float8 AS avgdl, %(idf0)s::float8 AS idf0)"
    taken = 0
    want = k + 1
    for _ in range(MAX_ROUNDS):
        taken = min(len(kept), want)
        while taken < len(kept) and kept[taken][0] <= kept[taken - 1][0] * (1 - EPS):
            taken += 1  # rows within the margin of the last taken come along
        params["ids"] = [rid for _, rid in kept[:taken]]
        rows = await reader.all(
            f"WITH {st} SELECT t.id, t.s, e.event_id, e.ts, e.text FROM (SELECT m.id, {score} AS s, m.ts, m.mid "
            f"FROM st, {scored} ORDER BY s, m.ts DESC, m.mid {MID} LIMIT %(k)s) t "
            f"JOIN ss_events e ON e.id = t.id ORDER BY t.s, t.ts DESC, t.mid {MID}", params)
        rest = min(left_out, kept[taken][0] if taken < len(kept) else math.inf)  # the best row not scored
        if len(rows) > k and rest > rows[k - 1][1] + abs(rows[k - 1][1]) * EPS or math.isinf(rest):
            hits = [tuple(r) for r in rows[:k]]
            if len(rows) > k:
                hits.append((0, math.inf, "", 0, ""))
            return version, dirty, hits
        if taken == len(kept):
            return None  # only rows cut short could still rank: the slow way
        want *= 4
    return None
