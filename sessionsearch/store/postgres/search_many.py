"""A relevance search of many agents on PostgreSQL in one statement, with the scores the agents'
own statements give (search.py) to the last bit.

Every agent's rows are in the same tables, so the per-agent statement repeats only to plan itself
again: a thousand agents were a thousand plans of one large statement (~2 ms each), most of a rare
word's cost. Here the agents come in as arrays (with each one's kept head and cached counts,
DfCache), `st` is ss_search_stats for each agent (a LATERAL call, so each agent has its own N,
avgdl and df: SPEC §4's BM25 per agent corpus), and the rows of the word (one walk of the GIN
index for every agent) are scored by the same expressions from their own agent's `st` row, then
cut to the top k of them all. An agent with no row in that cut still reports its head.

Only a scope of whole agents (`include` None) comes here; a row of a window gone from the
catalog (an orphan awaiting the sweep) is left out before the cut, as the caller drops one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .db import Reader
from .search import CACHED, HEAD_COLUMNS, MID, DfCache, Query, scope_sql

# the head's arguments, per agent from the `ag` list (search.HEAD_ARGS's order and types)
AG_HEAD_ARGS = ("ag.ano, ag.hv, ag.he, ag.ha, CASE WHEN ag.hc IS NULL THEN NULL ELSE "
                "ARRAY(SELECT jsonb_array_elements_text(ag.hc::jsonb)) END, ag.hn, ag.ht, ag.hw, ag.hg")
AG_COLUMNS = (("ano", "integer"), ("hv", "bigint"), ("he", "bigint"), ("ha", "text"), ("hc", "text"),
              ("hn", "bigint"), ("ht", "bigint"), ("hw", "bigint"), ("hg", "numeric"))
CACHED_KINDS = ("bigint", "bigint", "bigint", "numeric", "bigint")


RARE_ROWS = 2000  # rows of a word, over every agent, up to which `st` is read only for its holders


def _rare(q: Query, caches: Sequence[DfCache]) -> bool:
    """Whether the rows holding every phrase are few over the agents, by the counts the caches
    last kept (each agent's smallest); False while one agent has none kept."""
    total = 0
    for cache in caches:
        counts = [cached[0] for cached in q.cached_dfs(cache)]
        if any(c is None for c in counts):
            return False
        total += min(c for c in counts if c is not None)
        if total > RARE_ROWS:
            return False
    return True


def _kept_head(cache: DfCache) -> tuple:
    version, epoch, at, recent, rows, tokens, windows, gen = cache.kept_head or (None,) * 8
    return version, epoch, at, None if recent is None else json.dumps(list(recent)), rows, tokens, windows, gen


async def search_many(reader: Reader, anos: Sequence[int], caches: Sequence[DfCache], q: Query, *, k: int,
                      order: str, exclude: list[int], role: str | None, since: int | None, until: int | None
                      ) -> list[tuple[int, frozenset[int], list[tuple]]]:
    """Per agent (in `anos` order): its meta version, dirty windows and those of its hits (id,
    bm25, message id, ts, text) that are among the top `k` of all the agents by `order`."""
    params: dict[str, Any] = {"k": k}
    kinds = dict(AG_COLUMNS) | {f"c{i}{field}": kind for i in range(len(q.phrases))
                                for field, kind in zip(CACHED, CACHED_KINDS, strict=True)}
    lists: dict[str, list] = {name: [] for name in kinds}
    for ano, cache in zip(anos, caches, strict=True):
        for (name, _), value in zip(AG_COLUMNS, (ano, *_kept_head(cache)), strict=True):
            lists[name].append(value)
        for i, cached in enumerate(q.cached_dfs(cache)):
            for field, value in zip(CACHED, cached, strict=True):
                lists[f"c{i}{field}"].append(value)
    for name, values in lists.items():
        params[f"ag_{name}"] = values
    params["anos"] = list(anos)
    # a word few rows hold (as the counts last kept say; a guess, which only costs speed): `st`
    # only for the agents holding it (ss_search_stats is most of a rare word's cost), a light
    # head for the others
    holders = _rare(q, caches)
    ag = ("ag AS (SELECT * FROM unnest(" + ", ".join(f"%(ag_{n})s::{kinds[n]}[]" for n in lists) + ") AS ag("
          + ", ".join(lists) + ")"
          + (f" WHERE ag.ano IN (SELECT m.ano FROM ss_index m WHERE m.tsv @@ {q.tsquery} "
             "AND m.ano = ANY(%(anos)s::integer[]))" if holders else "") + ")")
    stats = q.stats_cte(AG_HEAD_ARGS, lambda name: f"ag.{name}", "ag CROSS JOIN LATERAL ", "ag.ano AS ag_ano, ")
    # one walk of the word's rows for every agent (a walk per agent would read every agent's rows
    # of a common word a thousand times), each row scored from its own agent's `st` row; rows of
    # a window no longer hot (an orphan awaiting the sweep) are left out before the cut
    where = scope_sql(None, exclude, role, since, until, params, ano="st.ag_ano")
    hot = "hot AS MATERIALIZED (SELECT wid FROM ss_windows WHERE ano = ANY(%(anos)s::integer[]) AND cold = 0)"
    rows_of_word = (f"st, ss_index m WHERE m.tsv @@ {q.tsquery} AND {' AND '.join(where)} "
                    "AND m.wid IN (SELECT wid FROM hot)")
    columns = "m.id, m.ano, m.ts, m.mid"
    if order == "recent":  # the newest k chosen unscored, then scored (search.py's `recent` does so too)
        hot += (f", cand AS MATERIALIZED (SELECT m.id FROM {rows_of_word} ORDER BY m.ts DESC, m.mid {MID} "
                "LIMIT %(k)s)")
        source = q.terms_sql("st, cand c JOIN ss_index m ON m.id = c.id WHERE st.ag_ano = m.ano", columns=columns)
        best = (f"best AS (SELECT m.ano, m.id, {q.score_sql()} AS s, m.ts, m.mid FROM st, {source} "
                "WHERE st.ag_ano = m.ano)")
    else:
        source = q.terms_sql(rows_of_word, columns=columns)
        best = (f"best AS (SELECT m.ano, m.id, {q.score_sql()} AS s, m.ts, m.mid FROM st, {source} "
                f"WHERE st.ag_ano = m.ano ORDER BY s, m.ts DESC, m.mid {MID} LIMIT %(k)s)")
    params.update(q.params)
    light = ""
    if holders:  # HEAD's version, dirty windows and listing where the `st` rows have them, the rest NULL
        nulls = ["NULL::bigint"] * 3 + ["NULL::numeric", "NULL::bigint", "l.listing", "NULL::text", "NULL::text[]"]
        light = (" UNION ALL SELECT a.ano, false, a.meta_version, ARRAY(SELECT w.wid FROM ss_windows w "
                 f"WHERE w.ano = a.ano AND w.needs_rebuild = 1), {', '.join(nulls + ['NULL::bigint'] * len(q.phrases))}"
                 ", NULL::bigint, NULL::float8, NULL::text, NULL::bigint, NULL::text FROM ss_agents a, "
                 "(SELECT max(ano) AS listing FROM ss_agents) l WHERE a.ano = ANY(%(anos)s::integer[]) "
                 "AND a.ano NOT IN (SELECT ag_ano FROM st)")
    rows = await reader.all(
        f"WITH {ag}, {stats}, {hot}, {best} SELECT st.ag_ano, true, {q.stats_columns()}, r.id, r.s, r.event_id, "
        "r.ts, r.text FROM st LEFT JOIN LATERAL (SELECT b.id, b.s, b.mid, e.event_id, e.ts, e.text FROM best b "
        f"JOIN ss_events e ON e.id = b.id WHERE b.ano = st.ag_ano) r ON true{light}", params, last=True)
    found: dict[int, tuple[int, frozenset[int], list[tuple]]] = {}
    by_ano = dict(zip(anos, caches, strict=True))
    listing = 2 + HEAD_COLUMNS.index("listing")
    for row in rows:
        ano = row[0]
        if ano not in found and row[1]:
            version, dirty, _ = q.remember(row[2:], by_ano[ano])
            found[ano] = (version, dirty, [])
        elif ano not in found:  # holds no row of the word: its light head
            by_ano[ano].saw_listing(row[listing])
            found[ano] = (row[2], frozenset(row[3]), [])
        if row[-5] is not None:
            found[ano][2].append(tuple(row[-5:]))
    return [found[ano] for ano in anos]

