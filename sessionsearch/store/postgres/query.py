"""A search's words made ready for PostgreSQL (Query: phrases of lexemes, tsquery, BM25 terms), the
document counts each store keeps (DfCache), and the head every search statement reads first (HEAD).
The bottom of the backend's search modules with terms.py: search.py, recent.py, search_many.py,
sessions.py, wide.py, postings.py and bounds.py build on these."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ..base import Match
from .lexemes import query_phrases, quote
from .terms import FRESH_LIMIT, K1, B, is_prefix_key

MID = "COLLATE \"C\" NULLS FIRST"  # SQLite's order of message ids: bytes, NULL first
KNOWN = 4  # lexemes of a prefix looked up in each row before its terms are walked (Query.known)
KEPT_RECENT = 256  # windows changed since the kept head's snapshot, past which it is not kept (HEAD)


def tsquery_text(phrases: list[list[str]], prefix: bool, any_phrase: bool = False) -> str:
    """tsquery input for phrases of lexemes: each lexeme single-quoted with quotes and backslashes
    doubled (lexemes.quote), a phrase's lexemes following one another (<->), all phrases required
    (&; any of them, |, for `any_phrase`), the last lexeme a prefix (:*) when `prefix`. It is bound
    as a parameter and cast: no user text is read as tsquery syntax, and the planner sees the value
    (its selectivity picks the GIN index; a tsquery made inside the statement left it guessing, and
    it scanned the agent)."""
    last = len(phrases) - 1
    return (" | " if any_phrase else " & ").join(
        "(" + " <-> ".join(quote(lex) + (":*" if prefix and i == last and j == len(p) - 1 else "")
                           for j, lex in enumerate(p)) + ")" for i, p in enumerate(phrases))


def _positions(m: str, param: str, prefix: bool) -> str:
    """SQL: the positions in row `m` of the lexeme %(param)s (of any lexeme it begins when `prefix`)."""
    if prefix:
        return (f"coalesce((SELECT array_agg(pp) FROM unnest({m}.tsv) u CROSS JOIN unnest(u.positions) pp "
                f"WHERE starts_with(u.lexeme, %({param})s)), '{{}}'::smallint[])")
    return f"coalesce((SELECT u.positions FROM unnest({m}.tsv) u WHERE u.lexeme = %({param})s), '{{}}'::smallint[])"


class DfCache:
    """Document counts of phrases (by tsquery text) with the index state each was counted at, and
    the terms the agent's postings hold as last read (postings.py)."""

    KEPT = 4096

    def __init__(self) -> None:
        self._counts: OrderedDict[str, tuple[tuple[Any, ...], int]] = OrderedDict()
        self.head: tuple[int, int] | None = None  # (index rows, windows) of the agent as last seen
        self.postings_terms: frozenset[tuple[int, str]] | None = None  # None: to be read
        self.postings_read_at = 0.0
        self.postings_mark: int | None = None  # the mark of the build whose terms those are
        self.recent_kept = 0  # `recent` searches the newest rows kept by a build answered (recent.py)
        self.listing = 0  # the highest agent number a search of this store read (backend.py)
        # the head as last read: (version, epoch, at, recent, rows, tokens, windows, gen), HEAD checks it
        self.kept_head: tuple[Any, ...] | None = None

    def saw_listing(self, listing: int | None) -> None:
        self.listing = max(self.listing, listing or 0)

    def keep_head(self, head: dict[str, Any]) -> None:
        """A row of HEAD's columns, as read: the next search has it checked rather than summed
        (unless the windows it would send back are many: a transaction left open for long holds
        the snapshots' xmin back, and summing costs less than sending and comparing them)."""
        self.saw_listing(head["listing"])
        if len(head["recent"]) > KEPT_RECENT:
            self.kept_head = None
            return
        self.kept_head = (head["version"], head["epoch"], head["at"], head["recent"], head["rows"], head["tokens"],
                          head["windows"], head["gen"])

    def get(self, phrase: str) -> tuple[tuple[Any, ...], int] | None:
        hit = self._counts.get(phrase)
        if hit is not None:
            self._counts.move_to_end(phrase)
        return hit

    def put(self, phrase: str, state: tuple[Any, ...], df: int) -> None:
        self._counts[phrase] = (state, df)
        self._counts.move_to_end(phrase)
        while len(self._counts) > self.KEPT:
            self._counts.popitem(last=False)


def cached_docs(match: Match, caches: Sequence[DfCache]) -> list[float] | None:
    """Per word of `match`, the rows the stores' kept counts say hold it (summed over `caches`; a
    word of several phrases: its rarest phrase's; 0 for a word not counted yet, which is counted
    this time; inf for one no row holds), for Match.cut; None when no word was ever counted. The
    counts are those of the last search that counted them, whatever the index did since: they
    only choose the words."""
    out: list[float] = []
    known = False
    last = len(match.words) - 1
    for n, word in enumerate(match.words):
        phrases, prefix = query_phrases((word,), match.prefix and n == last)
        counts: list[float] = []
        for i, phrase in enumerate(phrases):
            text = tsquery_text([phrase], prefix and i == len(phrases) - 1)
            kept = [cache.get(text) for cache in caches]
            if any(k is None for k in kept):
                counts.append(0.0)
                continue
            known = True
            counts.append(float(sum(k[1] for k in kept if k is not None)) or math.inf)
        out.append(min(counts, default=0.0))
    return out if known else None


# The head of an agent's index: meta version, windows needing reconciliation, BM25 counters and the
# index state (columns version, dirty, rows, tokens, windows, gen, epoch), the agent listing's
# version (listing: the highest agent number, backend.py) and what the store keeps to have its
# counters checked rather than summed again next time (at, recent): schema migration 6
HEAD_ARGS = ("%(ano)s, %(hv)s::bigint, %(he)s::bigint, %(ha)s::text, %(hc)s::text[], %(hn)s::bigint, %(ht)s::bigint, "
             "%(hw)s::bigint, %(hg)s::numeric")
HEAD = f"SELECT * FROM ss_search_head({HEAD_ARGS})"
CACHED = ("", "v", "w", "g", "e")  # a phrase's cached count, then its index state: version, windows, gen, epoch
HEAD_COLUMNS = ("version", "dirty", "rows", "tokens", "windows", "gen", "epoch", "listing", "at", "recent")


def head_params(ano: int, cache: DfCache) -> dict[str, Any]:
    """HEAD's parameters: the agent and the head `cache` kept (NULLs when none)."""
    version, epoch, at, recent, rows, tokens, windows, gen = cache.kept_head or (None,) * 8
    return {"ano": ano, "hv": version, "he": epoch, "ha": at, "hc": recent, "hn": rows, "ht": tokens, "hw": windows,
            "hg": gen}


class Query:
    """A Match made ready for SQL: its phrases of lexemes, tsquery and BM25 expression, with
    their parameters (each phrase is one of FTS5's phrases: a df, a tf and an idf of its own)."""

    def __init__(self, match: Match) -> None:
        self.phrases, self.prefix = query_phrases(match.words, match.prefix)
        self.lexemes = [lex for phrase in self.phrases for lex in phrase]
        self.params: dict[str, Any] = {"q": tsquery_text(self.phrases, self.prefix, bool(match.any)),
                                       "k1": K1, "k1p1": K1 + 1.0, "omb": 1 - B, "b": B}
        self.tsquery = "%(q)s::tsquery"
        # per phrase of one prefix, SQL for an array of lexemes it likely begins (`_tf`; none: each row's
        # terms are walked)
        self.known: dict[int, str] = {}

    def is_prefix(self, i: int) -> bool:
        """Whether phrase i ends in a prefix (the query's last phrase, by a prefix match)."""
        return self.prefix and i == len(self.phrases) - 1

    def lone_prefix(self, i: int) -> bool:
        """Whether phrase i is one prefix alone (its lexemes many, found by their start)."""
        return self.is_prefix(i) and len(self.phrases[i]) == 1

    def _postings_key(self, i: int) -> str | None:
        """Phrase i as the agent's postings may hold it ('w:' and a word, 'p:' and a 1-8 letter
        prefix), for its count (schema migration 10); None for a phrase of several words."""
        if len(self.phrases[i]) != 1:
            return None
        lex = self.phrases[i][0]
        if self.is_prefix(i):
            return "p:" + lex if is_prefix_key(lex) else None
        return "w:" + lex

    def stats_sql(self, ano: int, cache: DfCache) -> str:
        """A CTE `st`, one row: the head (HEAD's columns), each phrase's df (df0, df1, …; the
        cached count while the index state it was counted at holds, else counted now, from the
        postings for a word or prefix they hold: schema migration 10's ss_search_stats), N (n),
        avgdl and each phrase's idf (idf0, …), computed as FTS5 computes them."""
        self.params.update(head_params(ano, cache))
        for i, cached in enumerate(self.cached_dfs(cache)):
            self.params.update({f"c{i}{field}": value for field, value in zip(CACHED, cached)})
        return self.stats_cte(HEAD_ARGS, lambda name: f"%({name})s")

    def cached_dfs(self, cache: DfCache) -> list[tuple[Any, ...]]:
        """Per phrase, the count `cache` kept and the index state it was counted at (CACHED's
        fields; NULLs when none); sets the phrases' tsquery texts and postings keys (q0, p0, …)."""
        self.params["fresh_limit"] = FRESH_LIMIT
        out = []
        for i, phrase in enumerate(self.phrases):
            self.params[f"p{i}"] = self._postings_key(i)
            q = self.params[f"q{i}"] = tsquery_text([phrase], self.is_prefix(i))
            state, df = cache.get(q) or ((None, None, None, None), None)
            out.append((df, *state))
        return out

    def stats_cte(self, head_args: str, cached: Callable[[str], str], source: str = "", keep: str = "") -> str:
        """stats_sql's `st` from the head's arguments and each cached count's SQL (`cached` of
        its parameter's name: c0, c0v, …), the function read from `source` (a FROM list ending
        in a comma or a lateral join), with `keep` (columns and a comma) before the head's."""
        def array(param: str, kind: str, fixed: bool = False) -> str:  # one value a phrase: scalars
            # bind for a tenth of a list's cost
            return "ARRAY[" + ", ".join(
                f"{(f'%({param.format(i)})s' if fixed else cached(param.format(i)))}::{kind}"
                for i in range(len(self.phrases))) + f"]::{kind}[]"
        call = (f"ss_search_stats({head_args}, {array('q{}', 'text', True)}, {array('c{}', 'bigint')}, "
                f"{array('c{}v', 'bigint')}, {array('c{}w', 'bigint')}, {array('c{}g', 'numeric')}, "
                f"{array('c{}e', 'bigint')}, {array('p{}', 'text', True)}, %(fresh_limit)s::bigint)")
        dfs = ", ".join(f"f.dfs[{i + 1}] AS df{i}" for i in range(len(self.phrases)))
        head = ", ".join(f"f.{c}" for c in HEAD_COLUMNS)
        return f"st AS MATERIALIZED ({self.bm25_select(f'SELECT {keep}{head}, {dfs} FROM {source}{call} f')})"

    def bm25_select(self, counts: str) -> str:
        """SQL: the rows of `counts` (a SELECT of the head's columns and df0, df1, …) with N (n),
        avgdl and each phrase's idf (idf0, …), computed as FTS5 computes them."""
        idfs = []
        for i in range(len(self.phrases)):
            x = f"ln(((n - df{i})::float8 + 0.5) / (df{i}::float8 + 0.5))"
            idfs.append(f"CASE WHEN {x} > 0.0 THEN {x} ELSE 1e-6::float8 END AS idf{i}")
        # counters and index agree but for rows written around them (never by this store's writes)
        n = "greatest(" + ", ".join(["rows"] + [f"df{i}" for i in range(len(self.phrases))]) + ") AS n"
        return (f"SELECT c.*, CASE WHEN n > 0 THEN tokens::float8 / n::float8 ELSE 1.0::float8 END AS avgdl, "
                f"{', '.join(idfs)} FROM (SELECT d.*, {n} FROM ({counts}) d) c")

    def stats_columns(self, st: str = "st") -> str:
        """The columns of `st` a statement returns for `remember` (the head's first)."""
        return ", ".join([f"{st}.{c}" for c in HEAD_COLUMNS] + [f"{st}.df{i}" for i in range(len(self.phrases))])

    def remember(self, row: tuple[Any, ...], cache: DfCache) -> tuple[int, frozenset[int], tuple[Any, ...]]:
        """(meta version, dirty windows, the rest of the row) from a row starting with
        stats_columns(), each df counted now kept in `cache`."""
        head = dict(zip(HEAD_COLUMNS, row))
        version, windows, gen, epoch = head["version"], head["windows"], head["gen"], head["epoch"]
        cache.head = (head["rows"], windows)
        cache.keep_head(head)
        start = len(HEAD_COLUMNS)
        count = len(self.phrases)
        for i, df in enumerate(row[start:start + count]):
            cache.put(self.params[f"q{i}"], (version, windows, gen, epoch), df)
        return version, frozenset(head["dirty"]), row[start + count:]

    def set_stats(self, n_rows: int, n_tokens: int, dfs: list[int]) -> None:
        """avgdl and each phrase's idf as parameters (avgdl, idf0, …), computed as stats_sql's `st`
        computes them, for a statement that reads them from a `st` made of those (postings.py)."""
        # counters and index agree but for rows written around them (never by this store's writes)
        n_rows = max(n_rows, *dfs)
        self.params["avgdl"] = n_tokens / n_rows if n_rows else 1.0
        for i, df in enumerate(dfs):
            idf = math.log((n_rows - df + 0.5) / (df + 0.5))
            self.params[f"idf{i}"] = idf if idf > 0.0 else 1e-6

    def _tf(self, m: str, i: int) -> str:
        """SQL: phrase i's occurrences in row `m` (single words from tf, exact; phrases from positions)."""
        phrase, prefix = self.phrases[i], self.is_prefix(i)
        for j, lex in enumerate(phrase):
            self.params[f"x{i}_{j}"] = lex
        if self.lone_prefix(i):
            walk = (f"(SELECT coalesce(sum(value::float8), 0) FROM jsonb_each_text({m}.tf) "
                    f"WHERE starts_with(key, %(x{i}_0)s))")
            known = self.known.get(i)
            if known is None:
                return walk
            # a row whose lexemes of the prefix are all known (none left once they are deleted, a
            # test in C) has its count summed from theirs, looked up; else its terms are walked.
            # The counts are whole numbers: summed in any order, the same float8
            looked = " + ".join(f"coalesce(({m}.tf ->> ({known})[{j}])::float8, 0)" for j in range(1, KNOWN + 1))
            return f"(CASE WHEN ts_delete({m}.tsv, {known}) @@ %(q{i})s::tsquery THEN {walk} ELSE {looked} END)"
        if len(phrase) == 1:
            return f"coalesce(({m}.tf ->> %(x{i}_0)s)::float8, 0)"
        follow = " AND ".join(
            f"(p + {j})::smallint = ANY({_positions(m, f'x{i}_{j}', prefix and j == len(phrase) - 1)})"
                              for j in range(1, len(phrase)))
        return f"(SELECT count(*)::float8 FROM unnest({_positions(m, f'x{i}_0', False)}) p WHERE {follow})"

    def terms_sql(self, source: str, columns: str = "m.id, m.ts, m.mid", *, counted: bool = False) -> str:
        """A FROM item `m`: the index rows `m` of `source` (a FROM list and its WHERE) with
        `columns` and what score_sql reads of each row, computed once per row: each phrase's tf
        (t0, t1, …; `counted`: read from `m`, made by tf_columns) and BM25's length term (dn).
        OFFSET 0 keeps the planner from folding the subquery up, which would copy each expression
        into every place it is read (a word's tf twice, and each jsonb lookup then twice a row: a
        quarter of a two-word search)."""
        tfs = "".join(f"{f'm.t{i}' if counted else self._tf('m', i)} AS t{i}, " for i in range(len(self.phrases)))
        return (f"(SELECT {columns}, {tfs}%(k1)s::float8 * (%(omb)s::float8 + %(b)s::float8 * m.dl / st.avgdl) AS dn "
                f"FROM {source} OFFSET 0) m")

    def tf_columns(self) -> str:
        """SQL: each phrase's tf in the index row `m` (t0, t1, …), for terms_sql's `counted`."""
        return ", ".join(f"{self._tf('m', i)} AS t{i}" for i in range(len(self.phrases)))

    def score_sql(self, m: str = "m", st: str = "st") -> str:
        """The row's bm25 (lower is better), term by term in FTS5's order of evaluation, from the
        statistics of `st` (stats_sql) and the row's terms `m` (terms_sql): the same operations
        in the same order as FTS5, so the same bits."""
        expr = "0.0::float8"
        for i in range(len(self.phrases)):
            expr = f"({expr} + {st}.idf{i} * (({m}.t{i} * %(k1p1)s::float8) / ({m}.t{i} + {m}.dn)))"
        return f"(-1.0::float8 * {expr})"
