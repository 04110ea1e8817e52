"""A relevance search of many agents on PostgreSQL in one statement, with the scores the agents'
own statements give (search.py) to the last bit.

Every agent's rows are in the same tables, so the per-agent statement repeats only to plan itself
again: a thousand agents were a thousand plans of one large statement (~2 ms each), most of a rare
word's cost. Here the agents come in as arrays (with each one's kept head and cached counts,
DfCache) and `st` holds each agent's head, N, avgdl, df and idf (SPEC §4's BM25 per agent
corpus), read for all of them at once: what ss_search_stats (schema migrations 6, 9, 10) reads
for one agent, as set operations, since a thousand calls of it (a few statements each) cost
50 ms. The rows of the word (one walk of the GIN index for every agent) are scored by the same
expressions from their own agent's `st` row, then cut to the top k of them all.

Only a scope of whole agents (`include` None) comes here; a row of a window gone from the
catalog (an orphan awaiting the sweep) is left out before the cut, as the caller drops one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .db import Reader
from .query import CACHED, HEAD_COLUMNS, KNOWN, MID, DfCache, Query
from .search import scope_sql

# per agent: its number, the head it kept (search.HEAD_ARGS's order), then per phrase the count
# it kept and that count's index state (search.CACHED)
AG_COLUMNS = (("ano", "integer"), ("hv", "bigint"), ("he", "bigint"), ("ha", "text"), ("hc", "text"),
              ("hn", "bigint"), ("ht", "bigint"), ("hw", "bigint"), ("hg", "numeric"))
CACHED_KINDS = ("bigint", "bigint", "bigint", "numeric", "bigint")
ROW_SHARE = 4  # a phrase in one in this many of the agents' rows has them read rather than the index (by_rows)
SAMPLE = 64  # rows of a prefix whose lexemes of it are taken as known (known_cte)
RECENT = "coalesce(array_agg(w.wid || ':' || w.idx_xid ORDER BY w.wid), '{}')"  # ss_search_head's `recent`


def array_literal(values: Iterable[Any], text: bool = False) -> str:
    """A PostgreSQL array literal of numbers (or of strings, `text`), NULL for None: bound as one
    string, it costs a fraction of the driver adapting a list value by value (a thousand agents'
    fourteen lists were a third of a rare word's time in Python)."""
    if not text:
        values = tuple(values)
        if None not in values:
            return "{" + ",".join(map(str, values)) + "}"
        return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"
    return "{" + ",".join("NULL" if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
                          for v in values) + "}"


def stats_ctes(q: Query, kinds: dict[str, str], only: str | None = None) -> str:
    """CTEs ending in `st`: per agent of `ag`, the columns of search.Query.stats_cte's `st` (the
    head, df0…, n, avgdl, idf0…) with ag_ano, each as ss_search_stats gives it for that agent.

    The kept head is taken where it holds (the agent's meta version and epoch as kept, and its
    windows changed since the kept snapshot's xmin the same), else the windows are summed, and
    the snapshot's xmin kept with the windows changed since; a phrase's kept count is taken where
    its index state is the head's, else counted, for every such agent in one walk of the GIN
    index (the count ss_search_stats makes; from the postings it makes the same count).
    `only`: a condition on `ag.ano` naming the agents to read (the others' rows left out)."""
    phrases = range(len(q.phrases))
    kept_recent = "CASE WHEN ag.hc IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(ag.hc::jsonb)) END"
    hd = ("hd AS MATERIALIZED (SELECT ag.*, a.meta_version AS version, a.idx_epoch AS epoch, "
          f"coalesce(ag.ha IS NOT NULL AND a.meta_version = ag.hv AND a.idx_epoch = ag.he AND {kept_recent} = "
          f"(SELECT {RECENT} FROM ss_windows w WHERE w.ano = ag.ano AND w.idx_xid >= ag.ha::xid8), false) AS kept "
          "FROM ag JOIN ss_agents a ON a.ano = ag.ano)")
    sums = ("sm AS (SELECT w.ano, coalesce(sum(w.idx_rows), 0)::bigint AS rows, coalesce(sum(w.idx_tokens), 0)::bigint "
            "AS tokens, count(*) AS windows, coalesce(sum(w.idx_gen), 0) AS gen FROM ss_windows w "
            "WHERE w.ano IN (SELECT hd.ano FROM hd WHERE NOT hd.kept) GROUP BY w.ano)")
    kept = ["c{i}", "c{i}v", "c{i}w", "c{i}g", "c{i}e"]
    head = ("h AS MATERIALIZED (SELECT hd.ano AS ag_ano, hd.kept, hd.version, "
            "ARRAY(SELECT w.wid FROM ss_windows w WHERE w.ano = hd.ano AND w.needs_rebuild = 1) AS dirty, "
            "CASE WHEN hd.kept THEN hd.hn ELSE coalesce(sm.rows, 0) END AS rows, "
            "CASE WHEN hd.kept THEN hd.ht ELSE coalesce(sm.tokens, 0) END AS tokens, "
            "CASE WHEN hd.kept THEN hd.hw ELSE coalesce(sm.windows, 0) END AS windows, "
            "CASE WHEN hd.kept THEN hd.hg ELSE coalesce(sm.gen, 0) END AS gen, hd.epoch, "
            "(SELECT max(a.ano) FROM ss_agents a) AS listing, CASE WHEN hd.kept THEN hd.ha ELSE x.at END AS at, "
            f"CASE WHEN hd.kept THEN {kept_recent.replace('ag.', 'hd.')} ELSE (SELECT {RECENT} FROM ss_windows w "
            "WHERE w.ano = hd.ano AND w.idx_xid >= x.at::xid8) END AS recent"
            + "".join(f", hd.{name.format(i=i)}" for i in phrases for name in kept)
            + " FROM hd LEFT JOIN sm ON sm.ano = hd.ano, "
            "(SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS at) x)")
    ctes = [hd, sums, head]
    joins = []
    settled = ["h.kept"]
    for i in phrases:
        same = f"(h.version, h.windows, h.gen, h.epoch) = (h.c{i}v, h.c{i}w, h.c{i}g, h.c{i}e)"
        settled.append(f"{same} IS TRUE")
        # the agents whose kept count no longer holds, counted in one walk (none: the walk never starts)
        ctes.append(f"n{i} AS (SELECT m.ano, count(*) AS df FROM ss_index m WHERE EXISTS (SELECT 1 FROM h "
                    f"WHERE {same} IS NOT TRUE) AND m.tsv @@ %(q{i})s::tsquery AND m.ano IN "
                    f"(SELECT h.ag_ano FROM h WHERE {same} IS NOT TRUE) GROUP BY m.ano)")
        joins.append((f"CASE WHEN {same} THEN h.c{i} ELSE coalesce(n{i}.df, 0) END AS df{i}",
                      f" LEFT JOIN n{i} ON n{i}.ano = h.ag_ano"))
    dfs = ", ".join(column for column, _ in joins)
    # settled: the head and every count as the agent kept them (the caller has nothing to keep)
    columns = ", ".join([f"h.{c}" for c in ("ag_ano", *HEAD_COLUMNS)] + [" AND ".join(settled) + " AS settled"])
    counts = f"SELECT {columns}, {dfs} FROM h" + "".join(join for _, join in joins)
    ctes.append(f"st AS MATERIALIZED ({q.bm25_select(counts)})")
    ag = ("ag AS (SELECT * FROM unnest(" + ", ".join(f"%(ag_{name})s::{kind}[]" for name, kind in kinds.items())
          + ") AS ag(" + ", ".join(kinds) + ")" + (f" WHERE {only}" if only else "") + ")")
    return ", ".join([ag, *ctes])


def hot_cut(name: str, rows: Callable[[str], str], order: str) -> str:
    """CTEs ending in `name`: the first %(k)s of `rows(check)` (a SELECT with a column wid, its
    WHERE open for `check`) by `order` (of its columns) whose window is hot, not an orphan
    awaiting the sweep (gone, or cold).

    Orphans are few and short-lived, so the hot test is made on the first %(k2)s (2k) rows only,
    not on every row of the word (a semi join a row: ~10% of a common word's walk). That cut
    stands when k of them are hot, or when they are every row: the rows past them rank below
    them all. Else the rows are walked again, each tested (never while the cut stands: its one-time
    filter is false)."""
    hot = "EXISTS (SELECT 1 FROM ss_windows hw WHERE hw.wid = r.wid AND hw.cold = 0)"
    return (f"{name}_raw AS MATERIALIZED ({rows('')} ORDER BY {order} LIMIT %(k2)s), "
            f"{name}_ok AS MATERIALIZED (SELECT (SELECT count(*) FROM {name}_raw r WHERE {hot}) >= %(k)s "
            f"OR (SELECT count(*) FROM {name}_raw) < %(k2)s AS ok), "
            f"{name} AS ((SELECT * FROM {name}_raw r WHERE (SELECT ok FROM {name}_ok) AND {hot} "
            f"ORDER BY {order} LIMIT %(k)s) UNION ALL (SELECT * FROM ({rows(' AND m.wid IN (SELECT wid FROM hot)')} "
            f"ORDER BY {order} LIMIT %(k)s) f WHERE NOT (SELECT ok FROM {name}_ok)))")


def known_cte(i: int, rows: bool) -> str:
    """A CTE `pl{i}`: the KNOWN lexemes of prefix phrase i most frequent in a sample of its rows
    (Query.known): a prefix a few words begin has them all, so each row's count is a few lookups,
    not a walk of its terms. Any sample gives the same counts (a row holding another is walked).
    The sample is of the agents' `rows` (by_rows), else from the GIN index."""
    matches = f"(m.tsv @@ %(q{i})s::tsquery) IS TRUE" if rows else f"m.tsv @@ %(q{i})s::tsquery"
    return (f"pl{i} AS MATERIALIZED (SELECT coalesce((SELECT array_agg(z.k ORDER BY z.c DESC, z.k) FROM "
            f"(SELECT k, count(*) AS c FROM (SELECT m.tf FROM ss_index m WHERE {matches} "
            f"AND m.ano = ANY(%(anos)s::integer[]) "
            f"LIMIT {SAMPLE}) s, jsonb_object_keys(s.tf) k WHERE starts_with(k, %(x{i}_0)s) GROUP BY k "
            f"ORDER BY c DESC, k LIMIT {KNOWN}) z), '{{}}'::text[]) AS l)")


def _kept_head(cache: DfCache) -> tuple[Any, ...]:
    version, epoch, at, recent, rows, tokens, windows, gen = cache.kept_head or (None,) * 8
    if recent is not None:
        recent = json.dumps(list(recent)) if recent else "[]"
    return version, epoch, at, recent, rows, tokens, windows, gen


def agent_params(anos: Sequence[int], caches: Sequence[DfCache], q: Query) -> tuple[dict[str, Any], dict[str, str]]:
    """The parameters of stats_ctes' `ag` (each agent's number, kept head and kept counts, as
    arrays) and its columns' kinds."""
    params: dict[str, Any] = {}
    kinds = dict(AG_COLUMNS) | {f"c{i}{field}": kind for i in range(len(q.phrases))
                                for field, kind in zip(CACHED, CACHED_KINDS, strict=True)}
    q.cached_dfs(caches[0])  # the phrases' texts (q0, …), the same for every agent
    texts = [q.params[f"q{i}"] for i in range(len(q.phrases))]
    unknown = ((None, None, None, None), None)
    agents = []  # per agent its row of `ag`
    for ano, cache in zip(anos, caches, strict=True):
        agent = [ano, *_kept_head(cache)]
        for text in texts:
            state, df = cache.get(text) or unknown
            agent += (df, *state)
        agents.append(agent)
    for name, values in zip(kinds, zip(*agents, strict=True), strict=True):
        params[f"ag_{name}"] = array_literal(values, text=kinds[name] == "text")
    return params, kinds


def remember_all(q: Query, anos: Sequence[int], caches: Sequence[DfCache], rows: Iterable[Sequence[Any]]
                 ) -> list[tuple[int, frozenset[int]] | None]:
    """Per agent (in `anos` order), its meta version and dirty windows from the first of its
    `rows` (each starting with ag_ano, settled, q.stats_columns()), what it counted kept in its
    cache (an agent settled kept them already); None for an agent no row is of."""
    found: dict[int, tuple[int, frozenset[int]]] = {}
    by_ano = dict(zip(anos, caches, strict=True))
    listing = 2 + HEAD_COLUMNS.index("listing")
    for row in rows:
        ano = row[0]
        if ano in found:
            continue
        if row[1]:
            by_ano[ano].saw_listing(row[listing])
            found[ano] = (row[2], frozenset(row[3]))
        else:
            version, dirty, _ = q.remember(tuple(row[2:]), by_ano[ano])
            found[ano] = (version, dirty)
    return [found.get(ano) for ano in anos]


def by_rows(q: Query, caches: Sequence[DfCache]) -> bool:
    """Whether the agents' rows are cheaper to read than the GIN index's list of the query's
    rarest phrase, which holds every agent's rows: when, by the counts kept (each agent's head
    and the phrases' counts, as the last search read them), that phrase is in at least one in
    ROW_SHARE of their rows. Reading them then costs at most ROW_SHARE times the rows the list
    would lead to, and never the other agents' share of the list."""
    texts = [q.params[f"q{i}"] for i in range(len(q.phrases))]
    rows = matched = 0
    for cache in caches:
        counts = [cache.get(text) for text in texts]
        dfs = [kept[1] for kept in counts if kept is not None]
        if cache.head is None or len(dfs) < len(texts):
            return False
        rows += cache.head[0]
        matched += min(dfs)
    return matched * ROW_SHARE >= rows


async def search_many(reader: Reader, anos: Sequence[int], caches: Sequence[DfCache], q: Query, *, k: int,
                      order: str, exclude: list[int], role: str | None, since: int | None, until: int | None,
                      sparse: bool = False) -> list[tuple[int, frozenset[int], list[tuple[Any, ...]]] | None]:
    """Per agent (in `anos` order): its meta version, dirty windows and those of its hits (id,
    bm25, message id, ts, text) that are among the top `k` of all the agents by `order`.

    `sparse` (order "recent"): only the agents of the newest rows are read, None in the others'
    place; the caller knows their heads (a word few of a thousand agents hold read every head,
    ~20 ms of the statement and as much in Python, for none of the hits)."""
    params, kinds = agent_params(anos, caches, q)
    params["k"] = k
    params["anos"] = params["ag_ano"]
    params["k2"] = 2 * k
    sparse = sparse and order == "recent"
    own_rows = by_rows(q, caches)
    known = []
    for i in range(len(q.phrases)):
        if q.lone_prefix(i):
            known.append(known_cte(i, own_rows))
            q.known[i] = f"(SELECT l FROM pl{i})"
    # one walk of the word's rows for every agent (a walk per agent would read every agent's rows
    # of a common word a thousand times), each row scored from its own agent's `st` row, read once
    # (the idfs carried up with the row's terms)
    hot = "hot AS MATERIALIZED (SELECT wid FROM ss_windows WHERE ano = ANY(%(anos)s::integer[]) AND cold = 0)"
    idfs = "".join(f", st.idf{i}" for i in range(len(q.phrases)))
    columns = f"m.id, m.ano, m.ts, m.mid, m.wid{idfs}"
    if sparse:  # the newest rows found before any head is read: their dirty windows all in one list
        where = scope_sql(None, exclude, role, since, until, params, st="dr", ano="ANY(%(anos)s::integer[])")
        hot += (", dr AS MATERIALIZED (SELECT coalesce(array_agg(w.wid), '{}') AS dirty FROM ss_windows w "
                "WHERE w.ano = ANY(%(anos)s::integer[]) AND w.needs_rebuild = 1)")
        rows_of_word = f"dr, ss_index m WHERE m.tsv @@ {q.tsquery} AND {' AND '.join(where)}"
        stats = stats_ctes(q, kinds, only="ag.ano IN (SELECT c.ano FROM cand c)")
    else:
        where = scope_sql(None, exclude, role, since, until, params, ano="st.ag_ano")
        rows_of_word = f"st, ss_index m WHERE m.tsv @@ {q.tsquery} AND {' AND '.join(where)}"
        stats = stats_ctes(q, kinds)
    if order == "recent":  # the newest k chosen unscored, then scored (search.py's `recent` does so too)
        cand = hot_cut("cand", lambda check: f"SELECT m.id, m.ano, m.ts, m.mid, m.wid FROM {rows_of_word}{check}",
                       f"ts DESC, mid {MID}")
        source = q.terms_sql("st, cand c JOIN ss_index m ON m.id = c.id WHERE st.ag_ano = m.ano", columns=columns)
        best = f"best AS (SELECT m.ano, m.id, {q.score_sql(st='m')} AS s, m.ts, m.mid FROM {source})"
        ctes = [*known, hot, cand, stats, best] if sparse else [stats, *known, hot, cand, best]
    else:
        # each row's terms read before it meets its agent's `st` row: joined, the rows are then
        # narrow (a merge join sorted 50,000 rows with their tsvectors and counts on disk)
        # the GIN index's list of the word is every agent's: for agents whose rows hold it often
        # (a hop of best_first's), their own rows are read instead (IS TRUE: no index use)
        matches = f"(m.tsv @@ {q.tsquery}) IS TRUE" if own_rows else f"m.tsv @@ {q.tsquery}"
        word = (f"(SELECT m.id, m.ano, m.ts, m.mid, m.wid, m.dl, {q.tf_columns()} FROM ss_index m "
                f"WHERE {matches} AND m.ano = ANY(%(anos)s::integer[]) OFFSET 0) m")
        scored = f"st, {word} WHERE {' AND '.join(where)}"
        best = hot_cut("best", lambda check: f"SELECT m.ano, m.id, {q.score_sql(st='m')} AS s, m.ts, m.mid, m.wid "
                                             f"FROM {q.terms_sql(scored + check, columns=columns, counted=True)}",
                       f"s, ts DESC, mid {MID}")
        ctes = [stats, *known, hot, best]
    params.update(q.params)
    rows = await reader.all(
        f"WITH {', '.join(ctes)} SELECT st.ag_ano, st.settled, {q.stats_columns()}, r.id, r.s, r.event_id, "
        "r.ts, r.text FROM st LEFT JOIN LATERAL (SELECT b.id, b.s, b.mid, e.event_id, e.ts, e.text FROM best b "
        "JOIN ss_events e ON e.id = b.id WHERE b.ano = st.ag_ano) r ON true", params, last=True)
    heads = remember_all(q, anos, caches, rows)
    hits: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        if row[-5] is not None:
            hits.setdefault(row[0], []).append(tuple(row[-5:]))
    return [None if head is None else (*head, hits.get(ano, [])) for ano, head in zip(anos, heads, strict=True)]
