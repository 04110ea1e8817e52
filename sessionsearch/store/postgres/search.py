"""Searches on PostgreSQL: BM25 exactly as SQLite FTS5's `bm25()` computes it, over the rows of
clean windows in scope, all reads of a search in one REPEATABLE READ snapshot.

BM25 (k1 1.2, b 0.75): for each query word i, idf_i = ln((N - df_i + 0.5) / (df_i + 0.5)) (1e-6
when not positive) and the row scores -sum(idf_i * tf_i * (k1 + 1) / (tf_i + k1 * (1 - b + b *
dl / avgdl))), lower is better. N and avgdl are the agent's indexed rows and tokens, summed from
the per-window counters every index write keeps (ss_windows.idx_rows, idx_tokens); df_i is counted
exactly from the GIN index for each search's words. As in FTS5 these cover every index row of the
agent, including those of windows awaiting reconciliation, and the terms are evaluated in FTS5's
order so scores agree to the last bit or nearly (tests/test_store_parity.py).
"""

from __future__ import annotations

import math
from typing import Any

from ..base import Match
from .db import Reader
from .lexemes import query_phrases, quote

K1, B = 1.2, 0.75
MID = "COLLATE \"C\" NULLS FIRST"  # SQLite's order of message ids: bytes, NULL first


def tsquery_text(phrases: list[list[str]], prefix: bool) -> str:
    """tsquery input for phrases of lexemes: each lexeme single-quoted with quotes and backslashes
    doubled (lexemes.quote), a phrase's lexemes following one another (<->), all phrases required
    (&), the last lexeme a prefix (:*) when `prefix`. It is bound as a parameter and cast: no user
    text is read as tsquery syntax, and the planner sees the value (its selectivity picks the GIN
    index; a tsquery made inside the statement left it guessing, and it scanned the agent)."""
    last = len(phrases) - 1
    return " & ".join("(" + " <-> ".join(quote(lex) + (":*" if prefix and i == last and j == len(p) - 1 else "")
                                         for j, lex in enumerate(p)) + ")" for i, p in enumerate(phrases))


def _positions(m: str, param: str, prefix: bool) -> str:
    """SQL: the positions in row `m` of the lexeme %(param)s (of any lexeme it begins when `prefix`)."""
    if prefix:
        return (f"coalesce((SELECT array_agg(pp) FROM unnest({m}.tsv) u CROSS JOIN unnest(u.positions) pp "
                f"WHERE starts_with(u.lexeme, %({param})s)), '{{}}'::smallint[])")
    return f"coalesce((SELECT u.positions FROM unnest({m}.tsv) u WHERE u.lexeme = %({param})s), '{{}}'::smallint[])"


class Query:
    """A Match made ready for SQL: its phrases of lexemes, tsquery and BM25 expression, with
    their parameters (each phrase is one of FTS5's phrases: a df, a tf and an idf of its own)."""

    def __init__(self, match: Match) -> None:
        self.phrases, self.prefix = query_phrases(match.words, match.prefix)
        self.lexemes = [lex for phrase in self.phrases for lex in phrase]
        self.params: dict[str, Any] = {"q": tsquery_text(self.phrases, self.prefix),
                                       "k1": K1, "k1p1": K1 + 1.0, "omb": 1 - B, "b": B}
        self.tsquery = "%(q)s::tsquery"

    def _is_prefix(self, i: int) -> bool:
        return self.prefix and i == len(self.phrases) - 1

    async def load_stats(self, reader: Reader, ano: int) -> tuple[int, frozenset[int]]:
        """N, avgdl and each phrase's df (FTS5 counts a phrase's rows over the whole agent), read
        with the head (meta version, windows needing reconciliation) in one round trip."""
        parts = []
        for i, phrase in enumerate(self.phrases):
            self.params[f"q{i}"] = tsquery_text([phrase], self._is_prefix(i))
            parts.append(f"(SELECT count(*) FROM ss_index WHERE ano = %(ano)s AND tsv @@ %(q{i})s::tsquery)")
        row = await reader.one(
            f"SELECT ({HEAD}), ({DIRTY}), coalesce(sum(idx_rows), 0)::bigint, coalesce(sum(idx_tokens), 0)::bigint"
            + "".join(", " + p for p in parts) + " FROM ss_windows WHERE ano = %(ano)s", {**self.params, "ano": ano})
        version, dirty, row = row[0], frozenset(row[1]), row[2:]
        self.set_stats(row[0], row[1], row[2:])
        return version, dirty

    def set_stats(self, n_rows: int, n_tokens: int, dfs) -> None:
        """avgdl and each phrase's idf from the agent's indexed rows and tokens and the dfs."""
        # counters and index agree but for rows written around them (never by this store's writes)
        n_rows = max(n_rows, *dfs)
        self.params["avgdl"] = n_tokens / n_rows if n_rows else 1.0
        for i, df in enumerate(dfs):
            idf = math.log((n_rows - df + 0.5) / (df + 0.5))
            self.params[f"idf{i}"] = idf if idf > 0.0 else 1e-6

    def _tf(self, m: str, i: int) -> str:
        """SQL: phrase i's occurrences in row `m` (single words from tf, exact; phrases from positions)."""
        phrase, prefix = self.phrases[i], self._is_prefix(i)
        for j, lex in enumerate(phrase):
            self.params[f"x{i}_{j}"] = lex
        if len(phrase) == 1 and prefix:
            return (f"(SELECT coalesce(sum(value::float8), 0) FROM jsonb_each_text({m}.tf) "
                    f"WHERE starts_with(key, %(x{i}_0)s))")
        if len(phrase) == 1:
            return f"coalesce(({m}.tf ->> %(x{i}_0)s)::float8, 0)"
        follow = " AND ".join(f"(p + {j})::smallint = ANY({_positions(m, f'x{i}_{j}', prefix and j == len(phrase) - 1)})"
                              for j in range(1, len(phrase)))
        return f"(SELECT count(*)::float8 FROM unnest({_positions(m, f'x{i}_0', False)}) p WHERE {follow})"

    def score_sql(self, m: str = "m") -> str:
        """The row's bm25 (lower is better), term by term in FTS5's order of evaluation."""
        expr = "0.0::float8"
        for i in range(len(self.phrases)):
            tf = self._tf(m, i)
            expr = (f"({expr} + %(idf{i})s::float8 * (({tf} * %(k1p1)s::float8) / ({tf} + %(k1)s::float8 * "
                    f"(%(omb)s::float8 + %(b)s::float8 * {m}.dl / %(avgdl)s::float8))))")
        return f"(-1.0::float8 * {expr})"


def scope_sql(include: list[int] | None, exclude: list[int] | None, role: str | None, since: int | None,
              until: int | None, params: dict[str, Any], dirty: frozenset[int], m: str = "m") -> list[str]:
    """Conditions on the index rows `m` for a search's scope: not in the windows needing
    reconciliation (`dirty`, read in the same snapshot; cold windows have no index rows), the
    windows in or out, the role bit, the time range. No join with the windows: with statistics
    not yet analyzed (a fresh import) the planner would walk the word once per window."""
    where = [f"{m}.ano = %(ano)s"]
    if dirty:
        where.append(f"NOT ({m}.wid = ANY(%(dirty)s::bigint[]))")
        params["dirty"] = sorted(dirty)
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


HEAD = "SELECT meta_version FROM ss_agents WHERE ano = %(ano)s"
DIRTY = "SELECT coalesce(array_agg(wid), '{}') FROM ss_windows WHERE ano = %(ano)s AND needs_rebuild = 1"


async def head(reader: Reader, ano: int) -> tuple[int, frozenset[int]]:
    """The agent's meta version and its windows needing reconciliation, in the reader's snapshot."""
    row = await reader.one(f"SELECT ({HEAD}), ({DIRTY})", {"ano": ano})
    return row[0], frozenset(row[1])


async def search_top(reader: Reader, ano: int, match: Match, *, k: int, order: str, include, exclude, role,
                     since, until) -> tuple[int, frozenset[int], list[tuple]]:
    """The exact top `k` hits (id, bm25, message id, ts, text) by `order`, then (0, inf) when more matched;
    for one word or one short prefix by relevance, from its postings when they can tell (postings.py)."""
    from .postings import postings_top  # it imports this module
    q = Query(match)
    if not q.lexemes:
        return (*await head(reader, ano), [])
    if order != "recent" and (found := await postings_top(reader, ano, q, k=k, include=include, exclude=exclude,
                                                          role=role, since=since, until=until)) is not None:
        return found
    version, dirty = await q.load_stats(reader, ano)
    params = {**q.params, "ano": ano, "k": k + 1}
    where = scope_sql(include, exclude, role, since, until, params, dirty)
    score = q.score_sql()
    params.update(q.params)
    key = "s, m.ts DESC, m.mid" if order != "recent" else "m.ts DESC, m.mid"
    outer = "t.s, t.ts DESC, t.mid" if order != "recent" else "t.ts DESC, t.mid"
    rows = await reader.all(
        f"SELECT t.id, t.s, e.event_id, e.ts, e.text FROM (SELECT m.id, {score} AS s, m.ts, m.mid "
        f"FROM ss_index m WHERE m.tsv @@ {q.tsquery} AND {' AND '.join(where)} "
        f"ORDER BY {key} {MID} LIMIT %(k)s) t JOIN ss_events e ON e.id = t.id ORDER BY {outer} {MID}", params)
    hits = [tuple(r) for r in rows[:k]]
    if len(rows) > k:
        hits.append((0, math.inf, "", 0, ""))
    return version, dirty, hits
