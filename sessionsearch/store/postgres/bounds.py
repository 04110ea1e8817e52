"""Score bounds per agent: what lets a search of many agents by relevance rank only the agents
that may hold a top hit (search/visits.py, best_first), as store/sqlite/bounds.py does on SQLite.

A fold keeps, per agent and lexeme, the highest count of the lexeme in one of its index rows
(max_tf) and the length of its shortest row holding it (min_dl; the writes add rows of their own
since: a lexeme's bounds are the highest and least of its rows), read in one snapshot with the
agent's index state (meta version, windows, summed idx_gen, idx_epoch: the state a cached df is
checked by, search.py), and from then on the writes keep them (`kept`: schema migration 14's
trigger on the index rows raises a lexeme's max_tf and lowers its min_dl with every row inserted;
a deleted row leaves them as loose bounds of the rows left); an agent created since has them kept
from its first row. While they are kept, every row's BM25 is bounded: a phrase's share of
the score rises with its count and falls as the row grows longer, and its idf and the average
length are the search's own (read in the same statement as the bound, for every agent at once).
A phrase of several lexemes occurs at most as often as each of them; a prefix at most as often as
the sum of its lexemes' highest counts (up to MAX_RANGE of them; past that the agent is not
bounded). Bounds folded before the writes kept them (not `kept`) hold only while the agent's index
state is the fold's; an agent whose state moved since is not bounded (it is ranked first).

The worker's postings check folds an agent whose bounds are not kept (store.postings_due,
"bounds"), up to MAX_ROWS rows; a fold waits FOLD_AFTER times as long as the last one took.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import psycopg

from ..base import ScoreBound
from .db import Db, Reader, the_row
from .query import DfCache, Query
from .search_many import agent_params, array_literal, remember_all, stats_ctes

MAX_ROWS = 200_000  # agents of more rows are not folded (their common words have postings)
MAX_RANGE = 64  # lexemes a prefix's bound sums; a prefix of more leaves the agent unbounded
FOLD_AFTER = 20  # a fold waits this many times its last one's duration: a twentieth of a core at most
MARGIN = 1e-9  # relative, added to a bound: far above the rounding of the search's own expression
LOCK = 0x626F756E  # advisory lock key space ("boun"), with the agent number as the second key (migration 14)

# the agent's index state and indexed rows, as a search's head reads them (search.py's HEAD)
STATE = ("SELECT a.meta_version AS version, count(w.wid) AS windows, coalesce(sum(w.idx_gen), 0) AS gen, "
         "a.idx_epoch AS epoch, coalesce(sum(w.idx_rows), 0)::bigint AS rows, "
         "coalesce(bool_or(w.needs_rebuild = 1), false) AS backlog FROM ss_agents a "
         "LEFT JOIN ss_windows w ON w.ano = a.ano WHERE a.ano = %(ano)s GROUP BY a.ano")


async def fold(db: Db, ano: int, max_rows: int = MAX_ROWS) -> dict[str, Any]:
    """Keep the agent's term bounds as of its index now; {} past `max_rows` rows (or none)."""
    started = time.monotonic()

    async def run(conn: psycopg.AsyncConnection) -> int | None:
        await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK, ano))
        await conn.execute("DELETE FROM ss_term_bounds WHERE ano = %s", (ano,))
        # one statement, one snapshot: the terms and the state they are of
        row = await the_row(conn, (
            f"WITH s AS ({STATE}), t AS (INSERT INTO ss_term_bounds (ano, term, max_tf, min_dl) "
            "SELECT %(ano)s, e.key, max(e.value::integer), min(m.dl) FROM ss_index m, jsonb_each_text(m.tf) e "
            "WHERE m.ano = %(ano)s AND (SELECT s.rows BETWEEN 1 AND %(max)s FROM s) GROUP BY e.key RETURNING 1), "
            "b AS (INSERT INTO ss_bounds_built (ano, version, windows, gen, epoch, folded_at, fold_s, kept) "
            "SELECT %(ano)s, s.version, s.windows, s.gen, s.epoch, %(now)s, 0, true FROM s "
            "WHERE s.rows BETWEEN 1 AND %(max)s ON CONFLICT (ano) DO UPDATE SET version = EXCLUDED.version, "
            "windows = EXCLUDED.windows, gen = EXCLUDED.gen, epoch = EXCLUDED.epoch, "
            "folded_at = EXCLUDED.folded_at, kept = true RETURNING 1) "
            "SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM b)"),
            {"ano": ano, "max": max_rows, "now": time.time()})
        if not row[1]:
            await conn.execute("DELETE FROM ss_bounds_built WHERE ano = %s", (ano,))
            return None
        await conn.execute("UPDATE ss_bounds_built SET fold_s = %s WHERE ano = %s",
                           (time.monotonic() - started, ano))
        return int(row[0])

    terms = await db.tx(run)
    if terms is None:
        return {}
    return {"terms": terms, "seconds": round(time.monotonic() - started, 3)}


async def bounds_due(reader: Reader, ano: int, max_rows: int = MAX_ROWS) -> bool:
    """Whether a fold would give the agent usable bounds it lacks, and the last one was long
    enough ago (FOLD_AFTER); never while windows wait for reconciliation (their rows move)."""
    row = await reader.one(
        f"SELECT s.backlog, s.rows, b.ano IS NOT NULL AND (b.kept OR (s.version, s.windows, s.gen, s.epoch) = "
        f"(b.version, b.windows, b.gen, b.epoch)), b.folded_at, b.fold_s FROM ({STATE}) s "
        "LEFT JOIN ss_bounds_built b ON b.ano = %(ano)s", {"ano": ano})
    if row is None:
        return False
    backlog, rows, fresh, folded_at, fold_s = row
    if backlog or not 0 < rows <= max_rows or fresh:
        return False
    return folded_at is None or time.time() >= folded_at + (1 + FOLD_AFTER) * fold_s


def prefix_end(prefix: str) -> str | None:
    """The least string above every string `prefix` begins (code point order, as COLLATE "C"
    orders UTF-8), or None when there is none."""
    while prefix:
        last = ord(prefix[-1]) + 1
        if 0xD800 <= last <= 0xDFFF:
            last = 0xE000
        if last <= 0x10FFFF:
            return prefix[:-1] + chr(last)
        prefix = prefix[:-1]
    return None


def _whole(q: Query, i: int) -> list[str] | None:
    """Phrase i's lexemes looked up whole (a last one that is a prefix only narrows it further),
    or None for a phrase of one prefix."""
    if q.lone_prefix(i):
        return None
    phrase = q.phrases[i]
    return sorted(set(phrase[:-1] if q.is_prefix(i) else phrase))


def _phrase_sql(q: Query, i: int, params: dict[str, Any]) -> str:
    """A lateral subquery (tf, dl, n): phrase i's highest count in one row, the shortest row that
    may hold it and how many of its lexemes the agent holds (a prefix: of the lexemes it begins,
    up to MAX_RANGE + 1)."""
    whole = _whole(q, i)
    if whole is None:
        prefix = params[f"bp{i}"] = q.phrases[i][0]
        end = prefix_end(prefix)
        upper = ""
        if end is not None:
            params[f"bu{i}"] = end
            upper = f" AND b.term < %(bu{i})s"
        return (f"(SELECT sum(r.max_tf) AS tf, min(r.min_dl) AS dl, count(*) AS n FROM (SELECT max(b.max_tf) AS "
                f"max_tf, min(b.min_dl) AS min_dl FROM ss_term_bounds b WHERE b.ano = st.ag_ano AND b.term >= %(bp{i})s"
                f"{upper} AND starts_with(b.term, %(bp{i})s) GROUP BY b.term LIMIT {MAX_RANGE + 1}) r)")
    params[f"be{i}"] = whole
    return (f"(SELECT min(r.max_tf) AS tf, max(r.min_dl) AS dl, count(*) AS n FROM (SELECT max(b.max_tf) AS max_tf, "
            f"min(b.min_dl) AS min_dl FROM ss_term_bounds b WHERE b.ano = st.ag_ano "
            f"AND b.term = ANY(%(be{i})s::text[]) GROUP BY b.term) r)")


def bound_sql(q: Query, params: dict[str, Any]) -> tuple[str, str]:
    """(SQL of a column `bound`, the lateral joins it reads) over `st` (search_many.stats_ctes):
    the highest score (-bm25) a row of the agent can have, 'Infinity' when not known,
    '-Infinity' when none matches. The terms as score_sql has them, in its order: a share of
    the score rises with the count and falls with the length, at every step of the arithmetic."""
    phrases = range(len(q.phrases))
    joins = "".join(f" LEFT JOIN LATERAL {_phrase_sql(q, i, params)} p{i} ON u.usable" for i in phrases)
    usable = ("LEFT JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM ss_bounds_built b WHERE b.ano = st.ag_ano AND "
              "(b.kept OR (b.version, b.windows, b.gen, b.epoch) = (st.version, st.windows, st.gen, st.epoch))) "
              "AS usable) u ON true")
    wholes = [_whole(q, i) for i in phrases]
    none = " OR ".join(f"p{i}.n = 0" if w is None else f"p{i}.n < {len(w)}" for i, w in enumerate(wholes))
    unbounded = " OR ".join(f"p{i}.n > {MAX_RANGE}" for i, w in enumerate(wholes) if w is None) or "false"
    # a row holding every phrase is at least as long as each one's shortest row
    dn = ("%(k1)s::float8 * (%(omb)s::float8 + %(b)s::float8 * greatest("
          + ", ".join(f"p{i}.dl" for i in phrases) + ") / st.avgdl)")
    score = "0.0::float8"
    for i in phrases:
        score = f"({score} + st.idf{i} * ((p{i}.tf * %(k1p1)s::float8) / (p{i}.tf + {dn})))"
    bound = (f"CASE WHEN NOT u.usable THEN 'Infinity'::float8 WHEN {none} THEN '-Infinity'::float8 "
             f"WHEN {unbounded} THEN 'Infinity'::float8 ELSE {score} * {1 + MARGIN!r}::float8 END AS bound")
    return bound, f" {usable}{joins}"


async def score_bounds(reader: Reader, anos: Sequence[int], caches: Sequence[DfCache], q: Query
                       ) -> list[ScoreBound] | None:
    """Each agent's ScoreBound for `q`, in `anos` order, with its head and counts read as a search
    of many agents reads them (search_many.py), and kept in `caches` as it keeps them; None when
    fewer than half the agents were ever folded (just imported: the search of them all is one
    statement, and reading every agent's head twice would only add to it)."""
    folded = (await reader.row("SELECT count(*) FROM ss_bounds_built WHERE ano = ANY(%s::integer[])",
                               (array_literal(anos),)))[0]
    if folded * 2 < len(anos):
        return None
    params, kinds = agent_params(anos, caches, q)
    stats = stats_ctes(q, kinds)
    bound, joins = bound_sql(q, params)
    params.update(q.params)
    rows = await reader.all(f"WITH {stats} SELECT st.ag_ano, st.settled, {q.stats_columns()}, {bound} FROM st{joins}",
                            params, last=True)
    found = {row[0]: row[-1] for row in rows}
    bounds = []
    for ano, head in zip(anos, remember_all(q, anos, caches, rows), strict=True):
        assert head is not None  # every agent of `ag` has its row of `st`
        bounds.append(ScoreBound(*head, found[ano]))
    return bounds
