"""Searches on PostgreSQL: BM25 exactly as SQLite FTS5's `bm25()` computes it, over the rows of
clean windows in scope, all reads of a search in one REPEATABLE READ snapshot.

BM25 (k1 1.2, b 0.75): for each query word i, idf_i = ln((N - df_i + 0.5) / (df_i + 0.5)) (1e-6
when not positive) and the row scores -sum(idf_i * tf_i * (k1 + 1) / (tf_i + k1 * (1 - b + b *
dl / avgdl))), lower is better. N and avgdl are the agent's indexed rows and tokens, summed from
the per-window counters every index write keeps (ss_windows.idx_rows, idx_tokens); df_i is counted
exactly from the GIN index. As in FTS5 these cover every index row of the agent, including those of
windows awaiting reconciliation, and the terms are evaluated in FTS5's order so scores agree to the
last bit or nearly (tests/test_postgres.py compares them with SQLite's).

A search is one statement (one round trip with its BEGIN and COMMIT, db.Reader): the head (meta
version, windows needing reconciliation), N, avgdl, each phrase's df and idf in one CTE, then the
top hits, each matching row's tf of each phrase read once (terms_sql). Counting df is most of a
common word's cost (the GIN index finds the rows, but the count visits each one's heap page),
so each store keeps
the df it counted with the index state it counted it at, (meta_version, count(windows),
sum(idx_gen), idx_epoch): schema migration 3 has every insert or delete of a window's index rows
stamp the window anew from a sequence (a window's stamp only grows, so the sum grows while the set
of windows stays), a window created or deleted moves meta_version, and index rows of a window that
is gone move idx_epoch. The statement reuses a cached df while that state holds and counts again
when it moved (schema migration 9's ss_search_stats, whose count is planned only when it runs).
Any write moves that state, so a word the agent's postings hold is counted from them instead (the
build's count plus the rows written since that hold it, migration 10), as postings.py counts it.
"""

from __future__ import annotations

import math
import time
from typing import Any

from .db import Reader
from .query import HEAD, HEAD_COLUMNS, MID, DfCache, Query, head_params
from .recent import kept_ctes, kept_word, recent_ctes, walk_windows
from .terms import RECENT

TERMS_TTL_S = 5.0  # a build by another process (a worker) is used by searches this much later at most


def scope_sql(include: list[int] | None, exclude: list[int] | None, role: str | None, since: int | None,
              until: int | None, params: dict[str, Any], m: str = "m", st: str = "st", ano: str = "%(ano)s"
              ) -> list[str]:
    """Conditions on the index rows `m` for a search's scope: not in the windows needing
    reconciliation (`st.dirty`, read in the same statement; cold windows have no index rows), the
    windows in or out, the role bit, the time range. No join with the windows: with statistics
    not yet analyzed (a fresh import) the planner would walk the word once per window."""
    where = [f"{m}.ano = {ano}", f"NOT ({m}.wid = ANY({st}.dirty))"]
    if include is not None:
        where.append(f"{m}.wid = ANY(%(incl)s::bigint[])")
        params["incl"] = list(include)
    if exclude:
        where.append(f"NOT ({m}.wid = ANY(%(excl)s::bigint[]))")
        params["excl"] = list(exclude)
    if role is not None:
        where.append(f"({m}.id & 1) = %(rb)s")
        params["rb"] = 1 if role == "assistant" else 0
    if since is not None:
        where.append(f"{m}.ts >= %(since)s")
        params["since"] = since
    if until is not None:
        where.append(f"{m}.ts < %(until)s")
        params["until"] = until
    return where


async def has_postings(reader: Reader, ano: int, key: tuple[int, str], cache: DfCache) -> bool:
    """Whether the agent's postings hold the term, by the list of their terms this process read at
    most TERMS_TTL_S ago (or since its own last build), with that build's mark (cache.postings_mark,
    which `recent` checks its kept rows against): a rare word then costs no round trip here.
    A list out of date only costs speed: a term built since waits for the next read, and a term
    dropped since is looked up and not found."""
    now = time.monotonic()
    if cache.postings_terms is None or now - cache.postings_read_at > TERMS_TTL_S:
        rows = await reader.all("SELECT p.kind, p.key, b.mark FROM ss_postings_built b "
                                "JOIN ss_postings p ON p.ano = b.ano WHERE b.ano = %s", (ano,))
        cache.postings_terms, cache.postings_read_at = frozenset((kind, term) for kind, term, _ in rows), now
        cache.postings_mark = rows[0][2] if rows else None
    return key in cache.postings_terms


async def search_top(reader: Reader, ano: int, q: Query, cache: DfCache, *, k: int, order: str,
                     include: list[int] | None, exclude: list[int] | None, role: str | None, since: int | None,
                     until: int | None) -> tuple[int, frozenset[int], list[tuple[Any, ...]]]:
    """The exact top `k` hits (id, bm25, message id, ts, text) of query `q` by `order`, then
    (0, inf) when more matched, scoring every match; one statement, the reader's last. (A word
    with postings is answered from them first, by relevance: postings.py, PgAgentStore.)"""
    if not q.lexemes:
        row = await reader.row(HEAD, head_params(ano, cache), last=True)
        head = dict(zip(HEAD_COLUMNS, row))
        cache.keep_head(head)
        return head["version"], frozenset(head["dirty"]), []
    params = {"k": k + 1}
    where = scope_sql(include, exclude, role, since, until, params)
    stats = q.stats_sql(ano, cache)
    kept = ""
    if order == "recent":  # scored once chosen: k + 1 rows, not every match sorted
        walk = walk_windows(q, cache, k + 1)
        word = kept_word(q)
        if word is not None and await has_postings(reader, ano, (RECENT, word), cache):
            cand, kept = kept_ctes(q, where, walk, params, word, cache.postings_mark), "(SELECT kept FROM ok), "
        else:
            cand = recent_ctes(q, where, walk, params)
        source = q.terms_sql(f"st, (SELECT id FROM cand ORDER BY ts DESC, mid {MID} LIMIT %(k)s) c "
                             "JOIN ss_index m ON m.id = c.id")
        top = f"{cand}, top AS (SELECT m.id, {q.score_sql()} AS s, m.ts, m.mid FROM st, {source})"
    else:
        source = q.terms_sql(f"st, ss_index m WHERE m.tsv @@ {q.tsquery} AND {' AND '.join(where)}")
        top = (f"top AS (SELECT m.id, {q.score_sql()} AS s, m.ts, m.mid FROM st, {source} "
               f"ORDER BY s, m.ts DESC, m.mid {MID} LIMIT %(k)s)")
    params.update(q.params)
    outer = "r.s, r.ts DESC, r.mid" if order != "recent" else "r.ts DESC, r.mid"
    rows = await reader.all(
        f"WITH {stats}, {top} SELECT {q.stats_columns()}, {kept}r.id, r.s, r.event_id, r.ts, r.text FROM st "
        "LEFT JOIN LATERAL (SELECT t.id, t.s, t.mid, e.event_id, e.ts, e.text FROM top t "
        f"JOIN ss_events e ON e.id = t.id) r ON true ORDER BY {outer} {MID}", params, last=True)
    version, dirty, rest = q.remember(rows[0], cache)
    if kept and rest[0]:
        cache.recent_kept += 1
    hits: list[tuple[Any, ...]] = [tuple(r[-5:]) for r in rows if r[-5] is not None]
    more = len(hits) > k
    hits = hits[:k]
    if more:
        hits.append((0, math.inf, "", 0, ""))
    return version, dirty, hits
