"""Exact top hits of a one-word prefix search (`w00*`) without scoring every row that matches.

FTS5 treats `"w00" *` as one phrase: its document count is the number of rows holding any
token with that prefix, and a row's frequency is the number of such tokens in it. bm25 of a
one-phrase query is then IDF x tf(k1+1) / (tf + k1(1 - b + b dl/avgdl)): the IDF is the same for
every row, and at a fixed tf the score falls as the row length dl grows. So the rows of one tf
run, ordered by (dl, rid), are in score order, and the best rows of a prefix are among the
shortest rows of each run. A build keeps, per common 2-4 letter prefix, the `CAP` shortest rows
of every tf run (of those, the `KEEP` best by score as of the build, and each run's first), the
run's full size, the prefix's document count and the index's row count, as of a position of the
index log (hot.py).

A search then scores, in Python with FTS5's own operations (as recent.py does): the kept rows,
and the rows indexed since the build (from the log; their frequencies counted in their text by a
scratch FTS5 table of the index's definition), with the document count the build's plus the
logged rows that match. The answer is exact when every run cut short at the cap ends below the
k-th score; else, or when a row was deleted since the build (the index holds fewer rows than the
build's plus those logged), or the log is long, the search goes to FTS5 alone.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections import OrderedDict
from pathlib import Path

from .hot import B, K1, average_length, varint, varint_sum
from .recent import _Counter

CAP = 128  # rows kept per tf run: an unscoped top 25 rarely reaches past the first few dozen
KEEP = 512  # rows kept per prefix, the best by score as of the build (a 95% prefix has 100+ tf runs)
MIN_LEN, MAX_LEN = 2, 4  # prefix lengths with postings (letters); longer prefixes are rare enough
MIN_DOCS = 2_000  # a prefix is built when its words are in at least this many rows (summed) …
MAX_PREFIXES = 4096  # … the most frequent first
FREQ_KEPT = 512  # prefixes whose occurrences in the logged rows are kept counted, per store
LOG_LIMIT = 2_000  # rows indexed since a build beyond which its prefix searches use FTS5 alone


def is_prefix_query(word: str) -> bool:
    """A word a prefix's postings can answer: ASCII letters and digits (one unicode61 token)."""
    return MIN_LEN <= len(word) <= MAX_LEN and word.isascii() and word.isalnum()


# -- building (a connection of its own, on a thread) ---------------------------------------------

def common_prefixes(conn: sqlite3.Connection, min_docs: int, max_prefixes: int) -> set[str]:
    """The 2-4 letter prefixes whose words are in at least `min_docs` rows, summed over the words
    (a bound on the rows matching the prefix), the most frequent first."""
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.pfx_vr USING fts5vocab(main, msg_fts, 'row')")
    sums: dict[str, int] = {}
    for term, doc in conn.execute("SELECT term, doc FROM temp.pfx_vr"):
        for n in range(MIN_LEN, min(MAX_LEN, len(term)) + 1):
            p = term[:n]
            sums[p] = sums.get(p, 0) + doc
    common = sorted(((d, p) for p, d in sums.items() if d >= min_docs and is_prefix_query(p)), reverse=True)
    return {p for _, p in common[:max_prefixes]}


def read_prefixes(path: Path, *, min_docs: int | None = None, max_prefixes: int | None = None,
                  cap: int | None = None, keep: int | None = None) -> tuple[int, int, dict[str, tuple[int, dict[int, int], list[tuple[int, int, int]]]]]:
    """(log position, index rows, {prefix: (docs, {tf: length of the first row left out, per run
    cut short}, kept rows (tf, dl, rid))}), read
    in one snapshot: one walk of the instances of the common prefixes' words, in term order.
    Limits default to the module's (MIN_DOCS, MAX_PREFIXES, CAP, KEEP)."""
    min_docs = MIN_DOCS if min_docs is None else min_docs
    max_prefixes = MAX_PREFIXES if max_prefixes is None else max_prefixes
    cap = CAP if cap is None else cap
    keep = KEEP if keep is None else keep
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.pfx_vi USING fts5vocab(main, msg_fts, 'instance')")
        conn.execute("BEGIN")
        (log_seq,) = conn.execute(
            "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'index_log'), 0)").fetchone()
        (averages,) = conn.execute("SELECT block FROM msg_fts_data WHERE id = 1").fetchone() or (b"",)
        n_rows = varint(averages, 0)[0] if averages else 0
        wanted = common_prefixes(conn, min_docs, max_prefixes)
        sizes = {rid: varint_sum(sz) for rid, sz in conn.execute("SELECT id, sz FROM msg_fts_docsize")}
        out: dict[str, tuple[int, dict[int, int], list[tuple[int, int, int]]]] = {}

        avgdl = average_length(averages) if averages else 1.0

        def finish(prefix: str, tf_of: dict[int, int]) -> None:
            runs: dict[int, list[tuple[int, int]]] = {}
            for rid, tf in tf_of.items():
                runs.setdefault(tf, []).append((sizes[rid], rid))
            for rows in runs.values():
                rows.sort()
            kept = [(i, tf, dl, rid) for tf, rows in runs.items() for i, (dl, rid) in enumerate(rows[:cap])]
            if len(kept) > keep:  # the best `keep` as of this build, and each run's first
                def factor(row: tuple[int, int, int, int]) -> float:
                    return row[1] / (row[1] + K1 * (1 - B + B * row[2] / avgdl))
                floor = sorted((factor(r) for r in kept), reverse=True)[keep - 1]
                kept = [r for r in kept if r[0] == 0 or factor(r) >= floor]
            counts: dict[int, int] = {}
            for _, tf, _, _ in kept:
                counts[tf] = counts.get(tf, 0) + 1
            # per run cut short, the length of its first row left out: no row left out scores above it
            cut = {tf: rows[counts[tf]][0] for tf, rows in runs.items() if counts[tf] < len(rows)}
            out[prefix] = (len(tf_of), cut, [r[1:] for r in kept])

        roots = sorted(p for p in wanted if not any(p[:n] in wanted for n in range(MIN_LEN, len(p))))
        for root in roots:
            open_: dict[int, tuple[str, dict[int, int]]] = {}  # length -> (prefix, {rid: tf})
            for term, rid in conn.execute("SELECT term, doc FROM temp.pfx_vi WHERE term >= ? AND term < ?",
                                          (root, root + "\U0010ffff")):
                for n in range(len(root), MAX_LEN + 1):
                    p = term[:n] if len(term) >= n else None
                    current = open_.get(n)
                    if current is not None and current[0] != p:
                        finish(*open_.pop(n))
                        current = None
                    if p is None or p not in wanted:
                        continue
                    if current is None:
                        current = open_[n] = (p, {})
                    current[1][rid] = current[1].get(rid, 0) + 1
            for prefix, tf_of in open_.values():
                finish(prefix, tf_of)
        conn.execute("COMMIT")
        return log_seq, n_rows, out
    finally:
        conn.close()


class PrefixWrites:
    """The writer's part: store a build's prefixes. Needs `c`, `tx()` and HotWrites' log."""

    c: sqlite3.Connection

    def store_prefixes(self, log_seq: int, n_rows: int,
                       prefixes: dict[str, tuple[int, dict[int, int], list[tuple[int, int, int]]]]) -> None:
        """Replace every prefix's postings by those read as of log position `log_seq`."""
        with self.tx() as c:  # type: ignore[attr-defined]
            c.execute("DELETE FROM prefix_postings")
            c.execute("DELETE FROM prefix_words")
            now = int(time.time() * 1000)
            listing = bool(self._log_limit())  # type: ignore[attr-defined]
            for pno, (prefix, (docs, runs, kept)) in enumerate(sorted(prefixes.items()), start=1):
                c.execute("INSERT INTO prefix_words VALUES (?, ?, ?, ?, ?, ?, ?)",
                          (prefix, pno, log_seq if listing else -1, n_rows, docs, json.dumps(runs), now))
                c.executemany("INSERT INTO prefix_postings VALUES (?, ?, ?, ?)", ((pno, *row) for row in kept))
            if listing:
                self._cut_log()  # type: ignore[attr-defined]


# -- searching (a reader connection, inside one read transaction) --------------------------------

class PrefixTop:
    """The exact top hits of one-word prefix searches, from the postings above (per store).

    The rows indexed since the build are read once each (by log position, which never changes
    what it lists) and each prefix's occurrences in them counted once, kept for the next searches
    until a build moves the log's base: a search then counts only the rows logged since the last.
    """

    def __init__(self) -> None:
        self._scratch: _Counter | None = None
        self._base: tuple[int, str] | None = None  # (the build's log position, index definition)
        self._log: dict[int, tuple[int, str, int]] = {}  # log position -> (row id, text, size)
        self._upto = 0  # the log read up to here
        self._freq: OrderedDict[str, tuple[int, dict[int, int]]] = OrderedDict()  # prefix -> (upto, {pos: tf})

    async def top(self, conn, prefix: str, k: int) -> list[tuple[int, float]] | None:
        """The exact top `k` (rid, bm25) of `"prefix" *` over the whole index, best first (bm25,
        then newest, then message id); None when the postings cannot tell (search FTS5 alone)."""
        head = await conn.execute_fetchall(
            "SELECT p.pno, p.log_seq, p.n_rows, p.docs, p.runs, "
            "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'index_log'), 0), "
            "(SELECT block FROM msg_fts_data WHERE id = 1), (SELECT sql FROM sqlite_master WHERE name = 'msg_fts') "
            "FROM prefix_words p WHERE p.prefix = ?", (prefix,))
        if not head:
            return None
        pno, log_seq, built_rows, docs, runs, last_seq, averages, schema = head[0]
        if log_seq < 0 or last_seq - log_seq > LOG_LIMIT or not averages or schema is None:
            return None
        if self._base != (log_seq, schema):
            self._base, self._log, self._upto, self._freq = (log_seq, schema), {}, log_seq, OrderedDict()
        rows = await conn.execute_fetchall(
            "SELECT 0, tf, dl, rid FROM prefix_postings WHERE pno = :pno UNION ALL "
            "SELECT 1, count(DISTINCT rid), NULL, NULL FROM index_log WHERE seq > :seq UNION ALL "
            "SELECT * FROM (SELECT 2, l.seq, f.text, l.rid FROM index_log l LEFT JOIN msg_fts f ON f.rowid = l.rid "
            "WHERE l.seq > :upto AND l.seq <= :last) UNION ALL "
            "SELECT 3, l.seq, d.sz, l.rid FROM index_log l LEFT JOIN msg_fts_docsize d ON d.id = l.rid "
            "WHERE l.seq > :upto AND l.seq <= :last",
            {"seq": log_seq, "pno": pno, "upto": self._upto, "last": last_seq})
        (n_fresh,) = [r[1] for r in rows if r[0] == 1]
        n_rows = varint(averages, 0)[0]
        if n_rows != built_rows + n_fresh:
            return None  # a row was deleted since the build (or a logged row is gone): counts unknown
        candidates = [(tf, dl, rid) for part, tf, dl, rid in rows if part == 0]
        if n_fresh:
            texts = {seq: (rid, text) for part, seq, text, rid in rows if part == 2}
            sizes = {seq: sz for part, seq, sz, _ in rows if part == 3}
            if any(text is None for _, text in texts.values()) or any(sz is None for sz in sizes.values()):
                return None  # a logged row is gone: see above
            for seq, (rid, text) in texts.items():
                self._log[seq] = (rid, text, varint_sum(sizes[seq]))
            self._upto = max(self._upto, last_seq)
            freq = self._frequencies(prefix, last_seq)
            if freq is None:
                return None
            latest: dict[int, int] = {}  # row id -> its last log position (a row logged again: its last text)
            for seq, (rid, _, _) in self._log.items():
                if seq <= last_seq and seq > latest.get(rid, 0):
                    latest[rid] = seq
            for rid, seq in latest.items():
                if tf := freq.get(seq):
                    docs += 1
                    candidates.append((tf, self._log[seq][2], rid))
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

    def _frequencies(self, prefix: str, last_seq: int) -> dict[int, int] | None:
        """{log position: the prefix's occurrences in that row, when any} up to `last_seq`."""
        upto, freq = self._freq.pop(prefix, (self._base[0], {}))  # type: ignore[index]
        if last_seq > upto:
            counter = self._counter(self._base[1])  # type: ignore[index]
            if counter is None:
                return None
            texts = [(seq, text) for seq, (_, text, _) in self._log.items() if upto < seq <= last_seq]
            for seq, (f,) in counter.frequencies(texts, [f'"{prefix}" *']).items():
                if f:
                    freq[seq] = int(f)
            upto = last_seq
        self._freq[prefix] = (upto, freq)
        while len(self._freq) > FREQ_KEPT:
            self._freq.popitem(last=False)
        return {seq: f for seq, f in freq.items() if seq <= last_seq}

    async def _ordered(self, conn, scored: list[tuple[float, int]], k: int) -> list[tuple[int, float]]:
        """The first `k` of `scored` (bm25, rid) by bm25, then newest, then message id."""
        info = {rid: (ts, mid) for rid, ts, mid in await conn.execute_fetchall(
            "SELECT rowid, ts, mid FROM msg_fts WHERE rowid IN (SELECT value FROM json_each(?))",
            (json.dumps([rid for _, rid in scored]),))}
        hits = sorted(((s, -(info[rid][0] or 0), info[rid][1], rid) for s, rid in scored if rid in info))
        return [(rid, s) for s, _, _, rid in hits[:k]]

    def _counter(self, schema: str | None) -> _Counter | None:
        if schema is None:
            return None
        if self._scratch is None or self._scratch.schema != schema:
            self._scratch = _Counter.for_schema(schema)
        return self._scratch
