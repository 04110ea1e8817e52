"""Exact top hits of a one-word prefix search (`w00*`) without scoring every row that matches.

FTS5 treats `"w00" *` as one phrase: its document count is the number of rows holding any
token with that prefix, and a row's frequency is the number of such tokens in it. bm25 of a
one-phrase query is then IDF x tf(k1+1) / (tf + k1(1 - b + b dl/avgdl)): the IDF is the same for
every row, and at a fixed tf the score falls as the row length dl grows. So the rows of one tf
run, ordered by (dl, rid), are in score order, and the best rows of a prefix are among the
shortest rows of each run. A build keeps, per common 1-8 letter prefix, the `CAP` shortest rows
of every tf run (of those, the `KEEP` best by score as of the build, and each run's first), per
run cut short the length of its first row left out (no row left out is shorter), the prefix's
document count and the index's row count, as of positions of the index log (postings.py) and of
`index_gone`, the index rows deleted since, with their text.

The index changes since those positions (`Changes`: each row touched, as it was at the build and
as it is now, its prefixes counted in its text by a scratch FTS5 table of the index's
definition) are merged in at search time: touched rows leave the kept rows, those indexed now
and matching join them, and the document count moves by the touched rows matching now less
those that matched at the build. The worker folds the changes into the postings (`read_fold`)
once they pass `FOLD_AFTER`, which keeps them short: a fold counts only the rows touched.

A search scores, in Python with FTS5's own operations (as recent.py does), the kept rows and
those from the changes. The answer is exact when every run cut short at the cap ends below the
k-th score; else, or when the changes are more than `LOG_LIMIT` or do not account for the
index's row count (a change not logged), the search goes to FTS5 alone.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from itertools import groupby
from operator import add, itemgetter
from pathlib import Path
from typing import Any

import aiosqlite

from ..prefix_choice import choose_prefixes
from .bm25 import K1, B, average_length, varint, varint_sum
from .fetch import fetch_all
from .postings import FRESH_LIMIT, HotWrites
from .recent import _Counter

CAP = 128  # rows kept per tf run: an unscoped top 25 rarely reaches past the first few dozen
KEEP = 512  # rows kept per prefix, the best by score as of the build (a 95% prefix has 100+ tf runs)
MIN_LEN, MAX_LEN = 1, 8  # prefix lengths with postings (letters): the palette's last word as it is typed
MIN_DOCS = 2_000  # a prefix is built when its words are in at least this many rows (summed) …
MAX_PREFIXES = 4096  # … the most frequent first
LOG_LIMIT = FRESH_LIMIT  # index changes since a build or fold beyond which its searches use FTS5 alone
FOLD_AFTER = 1_000  # index changes since a build or fold from which a fold is due (postings_build.py)

Runs = dict[int, list[tuple[int, int]]]  # tf -> rows (dl, rid), shortest first
Built = tuple[int, dict[int, int], list[tuple[int, int, int]]]  # (docs, {tf: cut}, kept rows (tf, dl, rid))


def is_prefix_query(word: str) -> bool:
    """A word a prefix's postings can answer: ASCII letters and digits (one unicode61 token)."""
    return MIN_LEN <= len(word) <= MAX_LEN and word.isascii() and word.isalnum()


# -- building (a connection of its own, on a thread) ---------------------------------------------

def common_prefixes(conn: sqlite3.Connection, min_docs: int, max_prefixes: int) -> tuple[set[str], dict[str, str]]:
    """The 1-8 letter prefixes whose words are in at least `min_docs` rows, summed over the words
    (a bound on the rows matching the prefix), the most frequent first; and those that begin the
    same terms as a shorter one, with it (prefix_choice.py)."""
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.pfx_vr USING fts5vocab(main, msg_fts, 'row')")
    return choose_prefixes(conn.execute("SELECT term, doc FROM temp.pfx_vr"), min_len=MIN_LEN, max_len=MAX_LEN,
                           min_docs=min_docs, max_prefixes=max_prefixes, usable=is_prefix_query)


def trim(runs: Runs, cut: dict[int, int], cap: int, keep: int,
         avgdl: float) -> tuple[list[tuple[int, int, int]], dict[int, int]]:
    """(kept rows (tf, dl, rid), {tf: cut}) of a prefix whose candidate rows are `runs`: the `cap`
    shortest of each run, of those the `keep` best by score (and each run's first). A run's cut,
    the length of its first row left out, only goes down: `cut` holds those of rows left out
    before (a fold), which stay out."""
    kept = [(i, tf, dl, rid) for tf, rows in runs.items() for i, (dl, rid) in enumerate(rows[:cap])]
    if len(kept) > keep:  # the best `keep`, and each run's first; within a run, a prefix of it
        def factor(row: tuple[int, int, int, int]) -> float:
            return row[1] / (row[1] + K1 * (1 - B + B * row[2] / avgdl))
        floor = sorted((factor(r) for r in kept), reverse=True)[keep - 1]
        kept = [r for r in kept if r[0] == 0 or factor(r) >= floor]
    counts: dict[int, int] = {}
    for _, tf, _, _ in kept:
        counts[tf] = counts.get(tf, 0) + 1
    cut = dict(cut)
    for tf, rows in runs.items():
        if (n := counts.get(tf, 0)) < len(rows):
            cut[tf] = min(cut.get(tf, rows[n][0]), rows[n][0])
    return [r[1:] for r in kept], cut


def read_prefixes(path: Path, *, min_docs: int | None = None, max_prefixes: int | None = None,
                  cap: int | None = None, keep: int | None = None) -> tuple[int, int, int, dict[str, Built]]:
    """(index_log position, index_gone position, index rows, {prefix: (docs, {tf: length of the
    first row left out, per run cut short}, kept rows (tf, dl, rid))}), read in one snapshot: the
    instances of each word with a common prefix, counted per row in C. Limits default to the
    module's (MIN_DOCS, MAX_PREFIXES, CAP, KEEP)."""
    min_docs = MIN_DOCS if min_docs is None else min_docs
    max_prefixes = MAX_PREFIXES if max_prefixes is None else max_prefixes
    cap = CAP if cap is None else cap
    keep = KEEP if keep is None else keep
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.pfx_vi USING fts5vocab(main, msg_fts, 'instance')")
        conn.execute("BEGIN")
        log_seq, gone_seq = positions(conn)
        (averages,) = conn.execute("SELECT block FROM msg_fts_data WHERE id = 1").fetchone() or (b"",)
        n_rows = varint(averages, 0)[0] if averages else 0
        wanted, same = common_prefixes(conn, min_docs, max_prefixes)
        avgdl = average_length(averages) if averages else 1.0
        # each prefix's rows and tf: per term, the rows of its instances, counted into each wanted
        # prefix of the term in C (Counter.update of an iterable); no loop per instance in Python
        # (a prefix beginning the terms a shorter one begins is not counted: it is a copy of it)
        tf_of: dict[str, Counter[int]] = {p: Counter() for p in wanted if p not in same}
        # one walk of every instance in term order, grouped by term in C: a query per term cost
        # ~0.3 ms of seeking each (11 of 39 s at 50,000 messages, 42,000 terms)
        first, second = itemgetter(0), itemgetter(1)
        for term, group in groupby(conn.execute("SELECT term, doc FROM temp.pfx_vi"), key=first):
            targets = [tf_of[p] for n in range(MIN_LEN, min(MAX_LEN, len(term)) + 1) if (p := term[:n]) in tf_of]
            if targets:
                docs = list(map(second, group))
                for counts in targets:
                    counts.update(docs)
        # rows by (length, rid) as one small int each, a rank, so that sorting a prefix's rows
        # compares machine-size ints
        order = sorted((varint_sum(sz), rid) for rid, sz in conn.execute("SELECT id, sz FROM msg_fts_docsize"))
        rank = {rid: i for i, (_, rid) in enumerate(order)}
        out: dict[str, Built] = {}
        for prefix, counts in tf_of.items():
            if counts:
                out[prefix] = (len(counts), *_shortest(counts, rank, order, cap, keep, avgdl))
        out.update({prefix: out[shorter] for prefix, shorter in same.items() if shorter in out})
        conn.execute("COMMIT")
        return log_seq, gone_seq, n_rows, out
    finally:
        conn.close()


def _shortest(counts: Counter[int], rank: dict[int, int], order: list[tuple[int, int]], cap: int, keep: int,
              avgdl: float) -> tuple[dict[int, int], list[tuple[int, int, int]]]:
    """({tf: cut}, kept rows) of a prefix whose rows hold `counts` ({rid: tf}): per tf run its
    cap + 1 shortest rows (enough for `trim`: the cap kept and the first left out). Each row is
    one int, tf * len(order) + its rank, so one sort in C puts the runs in order, shortest first."""
    span = len(order)
    keys = sorted(map(add, map(span.__mul__, counts.values()), map(rank.__getitem__, counts)))
    runs: Runs = {}
    i = 0
    while i < len(keys):
        tf = keys[i] // span
        end = bisect_left(keys, (tf + 1) * span, i)
        runs[tf] = [order[key - tf * span] for key in keys[i:min(end, i + cap + 1)]]
        i = end
    kept, cut = trim(runs, {}, cap, keep, avgdl)
    return cut, kept


def positions(conn: sqlite3.Connection) -> tuple[int, int]:
    """The highest index_log and index_gone positions ever given out (in the caller's snapshot)."""
    row: tuple[int, int] = conn.execute(
        "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'index_log'), 0), "
        "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'index_gone'), 0)").fetchone()
    return row


# -- the index changes since a build or fold -----------------------------------------------------

# The rows indexed (kind 0, at their log position) and deleted (kind 1, at their gone position,
# ordered after the log position `after`) in a span of positions, each with the text and size it
# has in the index now (NULL: not indexed now); deleted rows with the text they had.
CHANGES_SQL = (
    "SELECT 0, l.seq, l.rid, NULL, NULL, f.text, d.sz FROM index_log l "
    "LEFT JOIN msg_fts f ON f.rowid = l.rid LEFT JOIN msg_fts_docsize d ON d.id = l.rid "
    "WHERE l.seq > :upto AND l.seq <= :last UNION ALL "
    "SELECT 1, g.gseq, g.rid, g.after, g.text, f.text, d.sz FROM index_gone g "
    "LEFT JOIN msg_fts f ON f.rowid = g.rid LEFT JOIN msg_fts_docsize d ON d.id = g.rid "
    "WHERE g.gseq > :gupto AND g.gseq <= :glast")


class _Terms:
    """The built prefixes in a few texts, counted from the instances of a scratch in-memory FTS5
    table made with the index's own definition (so the same tokenizer)."""

    def __init__(self, counter: _Counter) -> None:
        self.schema = counter.schema
        self._conn = counter.conn
        self._conn.execute("CREATE VIRTUAL TABLE temp.scratch_vi USING fts5vocab(main, scratch, 'instance')")

    @classmethod
    def for_schema(cls, schema: str | None) -> _Terms | None:
        counter = _Counter.for_schema(schema) if schema is not None else None
        return cls(counter) if counter is not None else None

    def count(self, texts: list[str], wanted: set[str]) -> list[dict[str, int]]:
        """Per text, {prefix in `wanted`: its tokens with that prefix}."""
        out: list[dict[str, int]] = [{} for _ in texts]
        if not texts:
            return out
        c = self._conn
        c.execute("DELETE FROM scratch")
        c.executemany("INSERT INTO scratch (rowid, text) VALUES (?, ?)", enumerate(texts))
        last, found = None, []
        for term, doc in c.execute("SELECT term, doc FROM temp.scratch_vi"):  # in term order
            if term != last:
                last = term
                found = [p for n in range(MIN_LEN, min(MAX_LEN, len(term)) + 1) if (p := term[:n]) in wanted]
            counts = out[doc]
            for p in found:
                counts[p] = counts.get(p, 0) + 1
        return out


class Changes:
    """The rows indexed or deleted since a build's positions, read span by span in position
    order: each row touched, whether it was indexed at the build and the prefixes it matched
    then, and, as it is indexed now, its length and prefixes (frequencies), kept per prefix."""

    def __init__(self, wanted: set[str], terms: _Terms) -> None:
        self.wanted = wanted
        self._terms = terms
        self.touched: set[int] = set()  # rows indexed or deleted since the build
        self.before: dict[str, int] = {}  # prefix -> touched rows that matched it at the build
        self.now: dict[int, tuple[int, dict[str, int]]] = {}  # touched row indexed now -> (dl, {prefix: tf})
        self.by_prefix: dict[str, dict[int, int]] = {}  # prefix -> {touched row matching now: tf}
        self.net = 0  # touched rows indexed now less those indexed at the build
        self._best: dict[str, tuple[tuple[int, int], list[tuple[int, int, int]]]] = {}  # see rows()
        self._spans = 0  # spans taken in

    def apply(self, rows: list[tuple[Any, ...]]) -> bool:
        """Take in the next span of CHANGES_SQL's rows; False when they are not consistent (a
        row with text but no size: never in one snapshot)."""
        first: dict[int, tuple[int, str | None]] = {}  # newly touched row -> (position, text at the build)
        current: dict[int, tuple[str | None, bytes | None]] = {}
        for kind, seq, rid, after, gone, text, sz in rows:
            current[rid] = (text, sz)
            if rid in self.touched:
                continue
            pos = 2 * seq if kind == 0 else 2 * after + 1  # a deletion comes after the rows logged up to `after`
            if rid not in first or pos < first[rid][0]:
                first[rid] = (pos, gone if kind == 1 else None)  # first a deletion: the row was indexed then
        if any(text is not None and sz is None for text, sz in current.values()):
            return False
        self._spans += 1
        was = [(rid, gone) for rid, (_, gone) in first.items() if gone is not None]
        now = [(rid, text, sz) for rid, (text, sz) in current.items() if text is not None]
        counted = self._terms.count([t for _, t in was] + [t for _, t, _ in now], self.wanted)
        self.touched.update(first)
        for _, found in zip(was, counted):  # indexed at the build
            self.net -= 1
            for p in found:
                self.before[p] = self.before.get(p, 0) + 1
        for rid in current:
            if (old := self.now.pop(rid, None)) is not None:
                self.net -= 1
                for p in old[1]:
                    del self.by_prefix[p][rid]
        for (rid, _, sz), found in zip(now, counted[len(was):]):
            self.now[rid] = (varint_sum(sz or b""), found)
            self.net += 1
            for p, tf in found.items():
                self.by_prefix.setdefault(p, {})[rid] = tf
        return True

    def docs_moved(self, prefix: str) -> int:
        """How many more rows match `prefix` than at the build."""
        return len(self.by_prefix.get(prefix, ())) - self.before.get(prefix, 0)

    def rows(self, prefix: str, k: int | None = None) -> list[tuple[int, int, int]]:
        """The touched rows matching `prefix` now (tf, dl, rid); with `k`, only those that can be
        among its top k: per tf run the k shortest, and any as short as the k-th (a tie)."""
        if k is None:
            return [(tf, self.now[rid][0], rid) for rid, tf in self.by_prefix.get(prefix, {}).items()]
        cached = self._best.get(prefix)
        if cached is not None and cached[0] == (self._spans, k):
            return cached[1]
        runs: Runs = {}
        for rid, tf in self.by_prefix.get(prefix, {}).items():
            runs.setdefault(tf, []).append((self.now[rid][0], rid))
        best = []
        for tf, run in runs.items():
            if len(run) > k:
                run.sort()
                run = [r for r in run if r[0] <= run[k - 1][0]]
            best += [(tf, dl, rid) for dl, rid in run]
        self._best[prefix] = ((self._spans, k), best)
        return best


# -- folding the changes into the postings (a connection of its own, on a thread) ----------------

@dataclass(slots=True)
class Fold:
    """What a fold writes: the prefixes' new positions, row count, docs and cuts, and the kept
    rows of the prefixes whose rows changed; `base` the positions it started from."""

    base: tuple[int, int]
    to: tuple[int, int]
    n_rows: int
    heads: list[tuple[int, str, int]]  # (docs, runs JSON, pno)
    kept: dict[int, list[tuple[int, int, int]]]  # pno -> kept rows (tf, dl, rid), where changed
    touched: int


def read_fold(path: Path, *, cap: int | None = None, keep: int | None = None) -> Fold | None:
    """The changes since the prefixes' build or last fold folded into their postings, read in one
    snapshot; None when they cannot be (no usable postings, builds at different positions, or
    changes that do not account for the index's row count): a build is due instead."""
    cap = CAP if cap is None else cap
    keep = KEEP if keep is None else keep
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        heads = conn.execute("SELECT prefix, pno, log_seq, gone_seq, n_rows, docs, runs FROM prefix_words").fetchall()
        bases = {(h[2], h[3], h[4]) for h in heads}
        if len(bases) != 1:
            return None
        ((log_seq, gone_seq, built_rows),) = bases
        last, glast = positions(conn)
        (averages, schema) = conn.execute(
            "SELECT (SELECT block FROM msg_fts_data WHERE id = 1), "
            "(SELECT sql FROM sqlite_master WHERE name = 'msg_fts')").fetchone()
        terms = _Terms.for_schema(schema)
        if log_seq < 0 or not averages or terms is None:
            return None
        changes = Changes({h[0] for h in heads}, terms)
        if not changes.apply(conn.execute(CHANGES_SQL, {"upto": log_seq, "last": last, "gupto": gone_seq,
                                                        "glast": glast}).fetchall()):
            return None
        n_rows = varint(averages, 0)[0]
        if n_rows != built_rows + changes.net:
            return None
        avgdl = average_length(averages)
        leaving: dict[int, set[tuple[int, int, int]]] = {}  # pno -> kept rows touched since
        for pno, tf, dl, rid in conn.execute(
                "SELECT pno, tf, dl, rid FROM prefix_postings WHERE rid IN (SELECT value FROM json_each(?))",
                (json.dumps(list(changes.touched)),)):
            leaving.setdefault(pno, set()).add((tf, dl, rid))
        out_heads, out_kept = [], {}
        for prefix, pno, _, _, _, docs, runs in heads:
            cut = {int(tf): dl for tf, dl in json.loads(runs).items()}
            # rows matching now enter where their run was whole, or above its cut
            entering = [r for r in changes.rows(prefix) if r[0] not in cut or r[1] < cut[r[0]]]
            if entering or pno in leaving:
                rows = {tuple(r) for r in conn.execute("SELECT tf, dl, rid FROM prefix_postings WHERE pno = ?", (pno,))}
                grouped: Runs = {}
                for tf, dl, rid in (rows - leaving.get(pno, set())) | set(entering):
                    grouped.setdefault(tf, []).append((dl, rid))
                for run in grouped.values():
                    run.sort()
                out_kept[pno], cut = trim(grouped, cut, cap, keep, avgdl)
            out_heads.append((docs + changes.docs_moved(prefix), json.dumps(cut), pno))
        conn.execute("COMMIT")
        return Fold((log_seq, gone_seq), (last, glast), n_rows, out_heads, out_kept, len(changes.touched))
    finally:
        conn.close()


class PrefixWrites:
    """The writer's part: store a build's prefixes, fold changes in, list deleted index rows; on
    the writer's connection and transactions, sharing the index log of `hot`."""

    def __init__(self, c: sqlite3.Connection, tx: Callable[[], AbstractContextManager[sqlite3.Connection]],
                 hot: HotWrites) -> None:
        self.c = c
        self.tx = tx
        self.hot = hot

    def store_prefixes(self, log_seq: int, gone_seq: int, n_rows: int, prefixes: dict[str, Built]) -> None:
        """Replace every prefix's postings by those read as of positions `log_seq`, `gone_seq`."""
        with self.tx() as c:
            c.execute("DELETE FROM prefix_postings")
            c.execute("DELETE FROM prefix_words")
            now = int(time.time() * 1000)
            listing = bool(self.hot.log_limit())
            for pno, (prefix, (docs, runs, kept)) in enumerate(sorted(prefixes.items()), start=1):
                c.execute("INSERT INTO prefix_words (prefix, pno, log_seq, n_rows, docs, runs, built_at, gone_seq) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          (prefix, pno, log_seq if listing else -1, n_rows, docs, json.dumps(runs), now, gone_seq))
                c.executemany("INSERT INTO prefix_postings VALUES (?, ?, ?, ?)", ((pno, *row) for row in kept))
            if listing:
                self.hot.cut_log()

    def fold_prefixes(self, fold: Fold) -> bool:
        """Write a fold read by `read_fold`; False (nothing written) when the postings moved on
        since it read them (a build, or given up)."""
        with self.tx() as c:
            if c.execute("SELECT 1 FROM prefix_words WHERE log_seq != ? OR gone_seq != ? LIMIT 1",
                         fold.base).fetchone() or not c.execute("SELECT 1 FROM prefix_words LIMIT 1").fetchone():
                return False
            c.executemany("UPDATE prefix_words SET log_seq = ?, gone_seq = ?, n_rows = ?, docs = ?, runs = ? "
                          "WHERE pno = ?", ((*fold.to, fold.n_rows, *head) for head in fold.heads))
            for pno, kept in fold.kept.items():
                c.execute("DELETE FROM prefix_postings WHERE pno = ?", (pno,))
                c.executemany("INSERT INTO prefix_postings VALUES (?, ?, ?, ?)", ((pno, *row) for row in kept))
            self.hot.cut_log()
        return True

    def log_gone(self, where: str, params: tuple[Any, ...] | dict[str, Any]) -> None:
        """Inside a transaction, before the index rows `where` selects are deleted: list them with
        their text while the index log runs (searches and folds count them out; a first build
        reading meanwhile needs them too, so not only once prefixes have postings); the score
        bounds' log ends."""
        self.hot.bounds_gone(where, params)
        if self.hot.log_limit():
            self.c.execute("INSERT INTO index_gone (rid, after, text) SELECT rowid, coalesce((SELECT seq FROM "
                           "sqlite_sequence WHERE name = 'index_log'), 0), coalesce(text, '') FROM msg_fts "
                           f"WHERE {where}", params)


# -- searching (a reader connection, inside one read transaction) --------------------------------

class PrefixTop:
    """The exact top hits of one-word prefix searches, from the postings above (per store).

    The changes since the postings' positions are read once each, span by span, and kept
    (`Changes`) until the positions move (a build or fold): a search reads only the changes since
    the previous one.
    """

    def __init__(self) -> None:
        self._terms: _Terms | None = None
        self._base: tuple[int, int, str] | None = None  # (log position, gone position, index definition)
        self._changes: Changes | None = None
        self._upto = (0, 0)  # the changes read up to these positions

    async def top(self, conn: aiosqlite.Connection, prefix: str, k: int) -> list[tuple[int, float]] | None:
        """The exact top `k` (rid, bm25) of `"prefix" *` over the whole index, best first (bm25,
        then newest, then message id); None when the postings cannot tell (search FTS5 alone)."""
        head = await fetch_all(conn,
            "SELECT p.pno, p.log_seq, p.gone_seq, p.n_rows, p.docs, p.runs, "
            "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'index_log'), 0), "
            "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'index_gone'), 0), "
            "(SELECT block FROM msg_fts_data WHERE id = 1), (SELECT sql FROM sqlite_master WHERE name = 'msg_fts') "
            "FROM prefix_words p WHERE p.prefix = ?", (prefix,))
        if not head:
            return None
        pno, log_seq, gone_seq, built_rows, docs, runs, last, glast, averages, schema = head[0]
        if log_seq < 0 or (last - log_seq) + (glast - gone_seq) > LOG_LIMIT or not averages or schema is None:
            return None
        changes = await self._changes_to(conn, (log_seq, gone_seq, schema), prefix, (last, glast))
        n_rows = varint(averages, 0)[0]
        if changes is None or n_rows != built_rows + changes.net:
            return None  # a change not logged (or this snapshot is older than the changes read)
        kept = await fetch_all(conn, "SELECT tf, dl, rid FROM prefix_postings WHERE pno = ?", (pno,))
        candidates = [r for r in kept if r[2] not in changes.touched] + changes.rows(prefix, k)
        docs += changes.docs_moved(prefix)
        avgdl = average_length(averages)
        idf = math.log((n_rows - docs + 0.5) / (docs + 0.5))
        idf = idf if idf > 0.0 else 1e-6

        def bm25(tf: int, dl: int) -> float:  # the operations of FTS5's fts5Bm25Function, in its order
            f, d = float(tf), float(dl)
            return -1.0 * (0.0 + idf * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * d / avgdl))))

        scored = sorted((bm25(tf, dl), rid) for tf, dl, rid in candidates)
        cut = json.loads(runs)  # {tf: length of the run's first row left out}
        if len(scored) < k:
            return None if cut else await self._ordered(conn, scored, k)
        kth = scored[k - 1][0]
        if any(bm25(int(tf), dl) <= kth for tf, dl in cut.items()):
            return None  # a row past the cap could tie or beat the k-th
        return await self._ordered(conn, [s for s in scored if s[0] <= kth], k)

    async def _changes_to(self, conn: aiosqlite.Connection, base: tuple[int, int, str], prefix: str,
                          upto: tuple[int, int]) -> Changes | None:
        """The changes since `base` up to positions `upto` (this search's snapshot); None when
        they cannot be read (an index of another form, or an older snapshot than those read)."""
        if self._changes is None or self._base != base or prefix not in self._changes.wanted:
            if self._terms is None or self._terms.schema != base[2]:
                self._terms = _Terms.for_schema(base[2])
            if self._terms is None:
                return None
            wanted = {p for (p,) in await fetch_all(conn, "SELECT prefix FROM prefix_words")}
            self._base, self._changes, self._upto = base, Changes(wanted, self._terms), base[:2]
        if upto[0] < self._upto[0] or upto[1] < self._upto[1]:
            return None  # read by a search with a newer snapshot: this one would see rows it does not hold
        if upto != self._upto:
            rows = await fetch_all(conn, CHANGES_SQL, {"upto": self._upto[0], "last": upto[0],
                                                             "gupto": self._upto[1], "glast": upto[1]})
            if not self._changes.apply(rows):
                self._changes = None
                return None
            self._upto = upto
        return self._changes

    async def _ordered(self, conn: aiosqlite.Connection, scored: list[tuple[float, int]],
                       k: int) -> list[tuple[int, float]]:
        """The first `k` of `scored` (bm25, rid) by bm25, then newest, then message id."""
        info = {rid: (ts, mid) for rid, ts, mid in await fetch_all(conn,
            "SELECT rowid, ts, mid FROM msg_fts WHERE rowid IN (SELECT value FROM json_each(?))",
            (json.dumps([rid for _, rid in scored]),))}
        hits = sorted(((s, -(info[rid][0] or 0), info[rid][1], rid) for s, rid in scored if rid in info))
        return [(rid, s) for s, _, _, rid in hits[:k]]
