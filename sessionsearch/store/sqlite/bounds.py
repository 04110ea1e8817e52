"""Upper bounds of the bm25 an agent's rows can score for a query, so that a search of many
agents visits them best first and stops once the hits in hand beat every agent left
(search/best_first.py).

bm25 of a phrase is IDF(n) x tf(k1+1) / (tf + k1(1 - b + b dl/avgdl)): it falls as the phrase's
document count n grows (FTS5 floors IDF at 1e-6), rises with the phrase's frequency tf in a row,
and falls as the row's length dl grows. A fold keeps, per term of the index, its document count,
its highest frequency in a row and the length of the shortest row holding it (`term_bounds`),
read from FTS5's own vocabulary, as of one state of the index: its structure and averages
records, which every write changes (recent.py). While the index is in that state a phrase scores
at most IDF(n) x F(k1+1) / (F + k1(1 - b + b L/avgdl)), with

- one term: n, F and L as kept;
- a prefix: n the largest of its terms' (a row holding any of them matches), F the sum of their
  highest frequencies, L the least of their shortest rows;
- a phrase of several terms: n = 1 (if it matches at all), F the least of the terms' F (each
  instance of the phrase is one of each term), L the largest of their L (a row holds them all);

and a query at most the sum over its phrases. A term the agent does not hold: no row of it
matches, and the search passes over it.

The writer keeps the bounds as the index moves on (`kept`, below): every transaction that
indexes or deletes rows updates the terms of those rows in the same transaction, counted from
their indexed text with FTS5's tokens (a document more or less per row holding the term; the highest
frequency raised, the shortest row lowered, never the other way: a deleted row's frequency and
length stay as loose bounds), and the row and token totals it expects the index's averages record
to hold (meta `bounds_rows`, `bounds_tokens`). A search trusts the bounds while the averages
record holds those totals: a write that left the bounds alone, or tokens counted unlike FTS5's,
shows as a mismatch, and the agent is then searched whole until a fold. An agent's bounds are
kept from its first indexed row (an empty index is bounded by no terms) or from a fold; the
worker's postings check folds an agent whose bounds are not kept (postings_build.py, "bounds"),
up to MAX_ROWS rows; a larger agent is searched whole every time, as before bounds. A scope, a
role or a time range only leaves rows out, so the bound holds for every search of the agent (its
scores are the whole agent's, SPEC §4).
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

import aiosqlite

from ...text import unicode61
from ..base import Match
from .bm25 import EPS, K1, B, average_length, varint
from .fetch import fetch_all
from .fts import word_terms
from .newest import Stamp

MAX_ROWS = 200_000  # agents of more rows are not folded: ~5 s of reading the index a fold
# a fold waits this many times as long as the last one took after it: an agent written all the time
# (a live ingest) costs the worker at most a twentieth of a core, and stays searched whole meanwhile
FOLD_AFTER = 20
MAX_RANGE = 64  # terms a prefix's bound sums; a prefix of more is unbounded (the agent is searched)
UNKNOWN = math.inf  # the bound of an agent whose index moved on since its fold
NO_MATCH = -math.inf  # the bound of an agent holding none of some phrase's terms
# the index's averages record now, and the totals the writer kept the bounds for (None: not kept)
KEPT_SQL = ("SELECT (SELECT block FROM msg_fts_data WHERE id = 1), "
            "(SELECT value FROM meta WHERE key = 'bounds_rows'), (SELECT value FROM meta WHERE key = 'bounds_tokens')")
KNOWN_TERMS = 256  # terms and prefixes whose rows a store keeps (Known)


@dataclass(frozen=True, slots=True)
class Phrase:
    """One phrase of a query as FTS5 reads it: its tokens, the last a prefix when `prefix`."""

    tokens: tuple[str, ...]
    prefix: bool


@dataclass(frozen=True, slots=True)
class BoundQuery:
    """A query's phrases and the statement that reads what their bounds need of an agent."""

    phrases: tuple[Phrase, ...]
    exact: tuple[str, ...]  # the terms looked up whole
    prefixes: tuple[str, ...]  # the prefixes looked up as ranges (kind 1, 2, … in the statement's rows)
    sql: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Folded:
    """An agent's term bounds as of one index state (its structure and averages records)."""

    structure: bytes
    averages: bytes
    terms: list[tuple[str, int, int, int]]  # (term, docs, highest tf, shortest row)
    started: float  # when the read began (time.time)


# -- the query side ------------------------------------------------------------------------------

def fts_tokens(text: str) -> list[str]:
    """FTS5's tokens of `text` (unicode61 remove_diacritics 2), in order: the bounds are kept and
    looked up by the terms FTS5 indexes and looks up. The Python port (text/unicode61.py, tested
    against SQLite at every code point) rather than a scratch FTS5 table: a write tokenizes every
    text it indexes, and the table's three statements per text cost the writer more than the bounds'
    upserts (bench/bench_bounds_upkeep.py)."""
    if text.isascii():  # unicode61 on ASCII: runs of letters and digits, lower-cased (2x the port's speed)
        return _ASCII_TOKEN.findall(text.lower())
    return unicode61.tokens(text)


_ASCII_TOKEN = re.compile(r"[a-z0-9]+")


def _unquote(term: str) -> tuple[str, bool]:
    prefix = term.endswith(" *")
    body = term[:-2] if prefix else term
    return body[1:-1].replace('""', '"'), prefix


def bound_query(match: Match | None) -> BoundQuery | None:
    """The phrases of the query FTS5 runs for `match` (fts.fts5_match) and the statement reading
    their terms' bounds, or None when some phrase has no token (no bound is worth having), or for
    a query of any word (`Match.any`: a bound's terms are every phrase the row holds)."""
    if match is None or not match.words or match.any:
        return None
    last = len(match.words) - 1
    phrases = []
    for n, word in enumerate(match.words):
        for term in word_terms(word, match.prefix and n == last):
            text, prefix = _unquote(term)
            tokens = tuple(fts_tokens(text))
            if not tokens:
                return None
            phrases.append(Phrase(tokens, prefix))
    exact = tuple(sorted({t for p in phrases for t in (p.tokens[:-1] if p.prefix else p.tokens)}))
    prefixes = tuple(sorted({p.tokens[-1] for p in phrases if p.prefix}))
    arms = ["SELECT 0, term, docs, max_tf, min_dl, NULL, NULL FROM term_bounds "
            "WHERE term IN (SELECT value FROM json_each(:exact))"]
    params: dict[str, Any] = {"exact": json.dumps(list(exact)), "range": MAX_RANGE + 1}
    for i, lo in enumerate(prefixes):
        params[f"lo{i}"], params[f"hi{i}"] = lo, lo[:-1] + chr(ord(lo[-1]) + 1)
        arms.append(f"SELECT * FROM (SELECT {i + 1}, term, docs, max_tf, min_dl, NULL, NULL FROM term_bounds "
                    f"WHERE term >= :lo{i} AND term < :hi{i} ORDER BY term LIMIT :range)")
    # the index's averages now, and the totals the bounds were kept for (kept_of)
    arms.append(f"SELECT -1, {KEPT_SQL[len('SELECT '):]}, NULL, NULL, NULL")
    return BoundQuery(tuple(phrases), exact, prefixes, " UNION ALL ".join(arms), params)


async def word_docs(conn: aiosqlite.Connection, match: Match) -> list[float] | None:
    """Per word of `match`, the rows holding it as the kept bounds count them (a phrase's: its
    rarest term's; a word no row holds: inf, it matches nothing), for Match.cut; None while the
    bounds are not kept (the agent then cannot say). One lookup by the terms' primary key."""
    tokens = [[t for term in word_terms(word) for t in fts_tokens(_unquote(term)[0])] for word in match.words]
    rows = await fetch_all(conn,
        "SELECT term, docs FROM term_bounds WHERE term IN (SELECT value FROM json_each(:terms)) "
        "UNION ALL SELECT NULL, value FROM meta WHERE key = 'bounds_rows'",
                           {"terms": json.dumps(sorted({t for ts in tokens for t in ts}))})
    if not any(term is None and docs is not None for term, docs in rows):
        return None
    docs = {term: n for term, n in rows if term is not None}
    return [float(min((docs.get(t, 0) for t in ts), default=0) or math.inf) for ts in tokens]


Row = tuple[int, int, int]  # a term's (docs, highest tf, shortest row)


@dataclass
class Known:
    """What bound statements read of one agent, kept while its files keep one stamp (newest.py's
    rule: unchanged files, last written QUIET_S before the stamp), so a search of many agents reads
    again only the agents written since and the terms not yet asked of them."""

    stamp: Stamp | None  # None: the files' stamp could not be read (not kept)
    fresh: bool  # the bounds kept for the index as it is (kept_of)
    averages: bytes | None  # the index's averages record now
    version: int  # the meta version and the windows needing reconciliation, as _HEAD_SQL reads them
    dirty: frozenset[int]
    exact: dict[str, Row | None] = field(default_factory=dict)  # None: the agent holds no such term
    ranges: dict[str, list[Row]] = field(default_factory=dict)  # a prefix's terms, MAX_RANGE + 1 at most

    bounds: dict[tuple[Phrase, ...], float] = field(default_factory=dict)  # by query, as computed

    def bound(self, query: BoundQuery) -> float | None:
        """The agent's bound for `query`, None when a term of it was not read yet."""
        if not self.fresh:
            return UNKNOWN
        if (bound := self.bounds.get(query.phrases)) is not None:
            return bound
        if any(t not in self.exact for t in query.exact) or any(lo not in self.ranges for lo in query.prefixes):
            return None
        if len(self.bounds) >= KNOWN_TERMS:
            self.bounds.clear()
        bound = agent_bound(query, self.averages, self.exact, self.ranges)
        self.bounds[query.phrases] = bound
        return bound

    def add(self, query: BoundQuery, rows: list[tuple[Any, ...]]) -> None:
        """The rows query.sql read (the state row last) added to what is known."""
        self.exact.update(dict.fromkeys(query.exact))
        self.ranges.update((lo, []) for lo in query.prefixes)
        for kind, term, docs, max_tf, min_dl, _, _ in rows[:-1]:
            if kind == 0:
                self.exact[term] = (docs, max_tf, min_dl)
            elif kind > 0:
                self.ranges[query.prefixes[kind - 1]].append((docs, max_tf, min_dl))
        if len(self.exact) + len(self.ranges) > KNOWN_TERMS:  # a store's memory stays bounded
            self.exact = {t: self.exact[t] for t in query.exact}
            self.ranges = {lo: self.ranges[lo] for lo in query.prefixes}


def known_of(query: BoundQuery, stamp: Stamp | None, rows: list[tuple[Any, ...]], version: int,
             dirty: frozenset[int]) -> Known:
    """What the rows of query.sql (the state row last) tell of the agent, as of `stamp`."""
    state = rows[-1]
    known = Known(stamp, kept_of(state[1], state[2], state[3]), state[1], version, dirty)
    known.add(query, rows)
    return known


def totals(averages: bytes | None) -> tuple[int, int]:
    """The index's rows and tokens (all columns) from its averages record."""
    if not averages:
        return 0, 0
    rows, i = varint(averages, 0)
    tokens = 0
    while i < len(averages):
        n, i = varint(averages, i)
        tokens += n
    return rows, tokens


def kept_of(averages: bytes | None, rows: int | None, tokens: int | None) -> bool:
    """Whether the bounds are kept for the index as it is: the writer kept them for the totals the
    averages record holds."""
    return rows is not None and totals(averages) == (rows, tokens)


def _score(n_rows: int, avgdl: float, docs: int, tf: int, dl: int) -> float:
    """bm25's part of one phrase (as FTS5 computes it), as a score: higher is better."""
    idf = math.log((n_rows - docs + 0.5) / (docs + 0.5))
    if idf <= 0.0:  # FTS5's floor
        idf = 1e-6
    return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))


def agent_bound(query: BoundQuery, averages: bytes | None, exact: dict[str, Row | None],
                ranges: dict[str, list[Row]]) -> float:
    """The highest score (-bm25) a row of the fold can have for `query`, from the index's averages
    record now and the fold's terms' rows (module docstring)."""
    n_rows = varint(averages, 0)[0] if averages else 0
    if not averages or not n_rows:
        return NO_MATCH
    avgdl = average_length(averages)
    total = 0.0
    for phrase in query.phrases:
        kept: list[Row] = []
        for n, token in enumerate(phrase.tokens):
            if phrase.prefix and n == len(phrase.tokens) - 1:
                terms = ranges[token]
                if len(terms) > MAX_RANGE:
                    return UNKNOWN
                if not terms:
                    return NO_MATCH
                kept.append((max(t[0] for t in terms), sum(t[1] for t in terms), min(t[2] for t in terms)))
            elif (row := exact.get(token)) is not None:
                kept.append(row)
            else:
                return NO_MATCH
        if len(kept) == 1:
            docs, tf, dl = kept[0]
        else:
            docs, tf, dl = 1, min(t[1] for t in kept), max(t[2] for t in kept)
        total += _score(n_rows, avgdl, docs, tf, dl)
    return total * (1 + EPS)  # never below FTS5's own rounding of the same sum


# -- the fold --------------------------------------------------------------------------------------

def read_bounds(path: Path, max_rows: int = MAX_ROWS) -> Folded | None:
    """Every term's bounds as of the index's state now, read in one snapshot on a connection of
    its own; None past `max_rows` rows, with no rows, or when the bounds kept are of this state
    already. Each term's rows and their frequencies are counted from FTS5's instances, the row
    lengths taken from its docsize table."""
    started = time.time()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.bounds_vi USING fts5vocab(main, msg_fts, 'instance')")
        conn.execute("BEGIN")
        state = conn.execute("SELECT (SELECT block FROM msg_fts_data WHERE id = 10), "
                             "(SELECT block FROM msg_fts_data WHERE id = 1)").fetchone()
        if not state[0] or not state[1] or not 0 < varint(state[1], 0)[0] <= max_rows:
            return None
        if kept_of(*conn.execute(KEPT_SQL).fetchone()):
            return None
        length = {rid: sz[0] if sz[0] < 0x80 else varint(sz, 0)[0]  # the text column's size comes first
                  for rid, sz in conn.execute("SELECT id, sz FROM msg_fts_docsize")}
        row_of, length_of = itemgetter(1), length.__getitem__
        terms = []
        for term, instances in groupby(conn.execute("SELECT term, doc FROM temp.bounds_vi"), key=itemgetter(0)):
            tf = Counter(map(row_of, instances))
            terms.append((term, len(tf), max(tf.values()), min(map(length_of, tf))))
        return Folded(state[0], state[1], terms, started)
    finally:
        conn.close()


def store_bounds(c: sqlite3.Connection, folded: Folded) -> bool:
    """Inside a write transaction: keep `folded` as the agent's bounds, if the index is still in
    its state (else nothing is stored: a write came between, and the next check folds again)."""
    now = c.execute("SELECT (SELECT block FROM msg_fts_data WHERE id = 10), "
                    "(SELECT block FROM msg_fts_data WHERE id = 1)").fetchone()
    if tuple(now) != (folded.structure, folded.averages):
        return False
    c.execute("DELETE FROM term_bounds")
    c.executemany("INSERT INTO term_bounds VALUES (?, ?, ?, ?)", folded.terms)
    c.execute("INSERT OR REPLACE INTO bounds_state (id, structure, averages, folded_at, fold_s) VALUES (1, ?, ?, ?, ?)",
              (folded.structure, folded.averages, folded.started, time.time() - folded.started))
    # the index is in the fold's state: from this transaction on, every write keeps the bounds
    _keep_totals(c, *totals(folded.averages))
    return True


def bounds_due(conn: sqlite3.Connection, rows: int, max_rows: int = MAX_ROWS) -> bool:
    """Whether a fold would give the agent usable bounds it lacks, and the last one was long enough
    ago (FOLD_AFTER), inside the check's snapshot."""
    if not 0 < rows <= max_rows or kept_of(*conn.execute(KEPT_SQL).fetchone()):
        return False
    state = conn.execute("SELECT folded_at, fold_s FROM bounds_state").fetchone()
    return state is None or time.time() >= state[0] + (1 + FOLD_AFTER) * state[1]


# -- the writer's upkeep (inside its transactions: postings.HotWrites) -----------------------------

def _keep_totals(c: sqlite3.Connection, rows: int, tokens: int) -> None:
    c.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", (("bounds_rows", rows), ("bounds_tokens", tokens)))


def token_counts(texts: list[str]) -> list[Counter[str]]:
    """Each indexed text's tokens as FTS5 counts them (unicode61, remove_diacritics 2)."""
    return [Counter(fts_tokens(text)) for text in texts]


def keep_added(c: sqlite3.Connection, texts: list[str], *, only: Callable[[], bool]) -> None:
    """Inside the transaction indexing rows of `texts`: their terms added to the bounds kept.
    `only()`: whether the index holds no other rows (its bounds are then kept from here on, if they
    were not); asked only then, so a write to an agent whose bounds are kept reads no more rows."""
    terms, tokens = _added(token_counts(texts))
    kept = c.execute("UPDATE meta SET value = value + CASE key WHEN 'bounds_rows' THEN ? ELSE ? END "
                     "WHERE key IN ('bounds_rows', 'bounds_tokens') RETURNING key", (len(texts), tokens)).fetchall()
    if not kept:
        if not only():  # rows indexed before: only a fold knows their terms
            return
        c.execute("DELETE FROM term_bounds")  # of rows no longer indexed, if any
        _keep_totals(c, len(texts), tokens)
    c.executemany("INSERT INTO term_bounds VALUES (?, ?, ?, ?) ON CONFLICT (term) DO UPDATE SET "
                  "docs = docs + excluded.docs, max_tf = max(max_tf, excluded.max_tf), "
                  "min_dl = min(min_dl, excluded.min_dl)", ((t, *v) for t, v in terms.items()))


def _added(counts: list[Counter[str]]) -> tuple[dict[str, tuple[int, int, int]], int]:
    """Per term of rows with these token counts: the rows holding it, its highest frequency in one,
    the shortest of them; and the rows' tokens in all."""
    docs: Counter[str] = Counter()
    max_tf: dict[str, int] = {}
    min_dl: dict[str, int] = {}
    tokens = 0
    for tf in counts:
        dl = sum(tf.values())
        tokens += dl
        docs.update(tf.keys())
        for term, n in tf.items():  # most terms are seen once a batch: the dicts' get beats max()/min()
            if n > max_tf.get(term, 0):
                max_tf[term] = n
            if dl < min_dl.get(term, dl + 1):
                min_dl[term] = dl
    return {term: (n, max_tf[term], min_dl[term]) for term, n in docs.items()}, tokens


def keep_removed(c: sqlite3.Connection, texts: list[str]) -> None:
    """Inside the transaction deleting index rows of `texts`, before they go: one document fewer
    for each of their terms (a term in no row left is dropped); the highest frequencies and
    shortest rows stay, still bounds of the rows left."""
    if not texts or c.execute("SELECT 1 FROM meta WHERE key = 'bounds_rows'").fetchone() is None:
        return
    docs: Counter[str] = Counter()
    tokens = 0
    for tf in token_counts(texts):
        tokens += sum(tf.values())
        docs.update(tf.keys())
    c.executemany("UPDATE term_bounds SET docs = docs - ? WHERE term = ?", ((n, t) for t, n in docs.items()))
    # one statement rather than a lookup per term (the writer's batches hold hundreds of terms)
    c.execute("DELETE FROM term_bounds WHERE term IN (SELECT value FROM json_each(?)) AND docs <= 0",
              (json.dumps(list(docs)),))
    c.execute("UPDATE meta SET value = value - CASE key WHEN 'bounds_rows' THEN ? ELSE ? END "
              "WHERE key IN ('bounds_rows', 'bounds_tokens')", (len(texts), tokens))
