"""Exact top hits for one common word without scoring every row that holds it.

FTS5 answers `MATCH word ORDER BY bm25 LIMIT k` by computing bm25 for every matching row, which
reads each row's length, a cost in the word's rows (docs/search-speed.md). For a
one-word query, BM25 depends on a row only through the word's frequency in it (tf) and the row's
length (dl): the word's IDF is a positive factor common to all rows, and at a fixed tf the score
falls as dl grows. So postings kept per word ordered by (tf, dl) are, within one tf value,
already in score order; a merge of the few tf runs yields rows best first, and stops once every
row left scores below the k-th one taken. FTS5 then scores just the rows taken, in the search's
scope (`+rowid IN (...)`), which gives the exact bm25 values and the tie order, and drops rows no
longer indexed or out of scope.

A word here is a token a one-word search looks up (query.hot_token): an ASCII word, or the
unigram or bigram shadow token of a one- or two-character CJK query (store/cjk.py).

The postings of a word are built from the FTS index itself (fts5vocab 'instance' for tf, the
docsize table for dl) by `optimize`. Rows indexed after a build are listed in `index_log` by every
write path while any word has postings, and each search scores them with FTS5 beside the rows
taken from the postings (in the same statement), so answers are exact at any time; once too many
rows were indexed since a word's build, searches for it go back to FTS5 alone until the next
`optimize`.
"""

from __future__ import annotations

import heapq
import json
import sqlite3
import time
from array import array
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import aiosqlite

from ...text.cjk import runs
from . import bounds as kept_bounds
from .bm25 import EPS, K1, B, average_length, varint, varint_sum
from .fetch import fetch_all

FRESH_LIMIT = 20_000  # rows indexed since a word's build beyond which its searches use FTS5 alone
PAGE = 64  # postings fetched per tf run and round trip
MAX_ROUNDS = 4  # rescoring rounds before a narrow scope gives up on the postings
# `optimize` builds postings for the words FTS5 is slow to rank (docs/cjk.md;
# docs/architecture/decisions.md):
MIN_DOCS = 500  # in at least this many rows (search.postingsMinDocs) …
MIN_SHARE = 0.0005  # … and this share of them,
# the most frequent first (the benchmark corpus at 1,000,000 rows: 3,329 words in 500+ rows, 1,059
# of them CJK unigrams and bigrams, 12.1 million postings)
MAX_WORDS = 4096
BATCH_ROWS = 1_000_000  # a build reads words in one snapshot until they hold this many postings (24 MB)


# -- building (a connection of its own, on a thread) ---------------------------------------------

def searchable(term: str) -> bool:
    """Whether a one-word search can rank `term` from postings (query.hot_token): ASCII letters
    and digits, or a CJK shadow token (a unigram or bigram of a run, store/cjk.py)."""
    if term.isascii():
        return term.isalnum() and term == term.lower()
    return len(term) <= 2 and runs(term) == [term]


def common_words(path: Path, *, min_docs: int, min_share: float, max_words: int) -> list[tuple[str, int]]:
    """The words in at least `min_docs` rows and `min_share` of them that a one-word search can
    rank from postings, most frequent first."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.hot_vr USING fts5vocab(main, msg_fts, 'row')")
        (blob,) = conn.execute("SELECT block FROM msg_fts_data WHERE id = 1").fetchone() or (b"",)
        rows = varint(blob, 0)[0] if blob else 0
        floor = max(min_docs, int(min_share * rows))
        words = [(term, doc) for term, doc in conn.execute(
            "SELECT term, doc FROM temp.hot_vr WHERE doc >= ? ORDER BY doc DESC, term", (floor,)) if searchable(term)]
        return words[:max_words]
    finally:
        conn.close()


def batches(words: list[tuple[str, int]], rows: int = BATCH_ROWS) -> list[list[str]]:
    """(word, docs) in order, grouped so that a group holds at most `rows` postings (or one word);
    the first groups smaller (an eighth of `rows`, doubling): a group's words are stored when all
    of it is read, and the first words, the most common, are those searches wait for most."""
    out: list[list[str]] = []
    limit = max(1, rows // 8)
    held = limit
    for word, docs in words:
        if held + docs > limit:
            if out:
                limit = min(rows, 2 * limit)
            out.append([])
            held = 0
        out[-1].append(word)
        held += docs
    return out


def read_postings(path: Path, words: list[str]) -> tuple[int, list[array[int]]]:
    """(log position, postings of each word) read in one snapshot of the index; the postings flat,
    tf, dl, rid after one another (a word in half of 1,000,000 rows: 12 MB, not 100 of tuples).
    Words read together share the connection's page cache: the row sizes of a rare word's rows
    are scattered over the docsize table, and a connection of its own per word read them at more
    than twice the cost."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.hot_vi USING fts5vocab(main, msg_fts, 'instance')")
        conn.execute("BEGIN")
        # the highest position ever given out: every row listed up to it is in this snapshot
        (log_seq,) = conn.execute(
            "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'index_log'), 0)").fetchone()
        out = []
        for word in words:
            # each row's size looked up once, not once per instance of the word in it
            cursor = conn.execute(
                "SELECT g.doc, g.tf, d.sz FROM (SELECT doc, count(*) AS tf FROM temp.hot_vi WHERE term = ? "
                "GROUP BY doc) g JOIN msg_fts_docsize d ON d.id = g.doc", (word,))
            postings = array("q")
            while rows := cursor.fetchmany(10_000):
                for rid, tf, sz in rows:
                    postings.extend((tf, varint_sum(sz), rid))
            out.append(postings)
        conn.execute("COMMIT")
        return log_seq, out
    finally:
        conn.close()


class HotWrites:
    """The writer's part: the index log, the score bounds' upkeep (bounds.py) and the postings, on the
    writer's connection `c`, each public method but the logs' one transaction of `tx()`
    (SqliteWriter.tx).

    meta `index_log` is 0 while no word has postings (nothing is listed), else the log position
    past which the oldest build is given up: its searches would go to FTS5 alone anyway, so the
    words built before that point are marked stale (log_seq -1) and the log cut, which keeps it
    at most FRESH_LIMIT rows long however long `optimize` is not run again.
    """

    def __init__(self, c: sqlite3.Connection, tx: Callable[[], AbstractContextManager[sqlite3.Connection]]) -> None:
        self.c = c
        self.tx = tx

    def log_limit(self) -> int:
        """The log position past which the oldest build is given up; 0 while nothing is listed."""
        limit: int = self.c.execute("SELECT value FROM meta WHERE key = 'index_log'").fetchone()[0]
        return limit

    def log_indexed(self, rows: list[tuple[Any, ...]]) -> None:
        """Inside an indexing transaction, just after the rows (id, indexed text, …) went in: list
        them while any word has postings, and keep the score bounds (bounds.py) with their terms."""
        if not rows:
            return
        if limit := self.log_limit():
            self.c.executemany("INSERT INTO index_log (rid) VALUES (?)", ((r[0],) for r in rows))
            self._expire_past(limit)
        def only() -> bool:
            return bool(self.c.execute("SELECT NOT EXISTS (SELECT 1 FROM msg_fts_docsize WHERE id NOT IN "
                                       "(SELECT value FROM json_each(?)))",
                                       (json.dumps([r[0] for r in rows]),)).fetchone()[0])
        kept_bounds.keep_added(self.c, [r[1] or "" for r in rows], only=only)

    def log_indexed_sql(self, select: str, params: dict[str, Any]) -> None:
        """As `log_indexed`, just before the rows (id, indexed text, …) a statement selects go in."""
        if limit := self.log_limit():
            self.c.execute(f"INSERT INTO index_log (rid) SELECT id FROM ({select})", params)
            self._expire_past(limit)
        only = not self.c.execute("SELECT 1 FROM msg_fts_docsize LIMIT 1").fetchone()  # asked before the rows go in
        kept_bounds.keep_added(self.c, [r[1] or "" for r in self.c.execute(select, params)], only=lambda: only)

    def bounds_gone(self, where: str, params: tuple[Any, ...] | dict[str, Any]) -> None:
        """Inside a transaction, before the index rows `where` selects are deleted: their terms
        taken out of the score bounds kept (bounds.py)."""
        gone = self.c.execute(f"SELECT text FROM msg_fts WHERE {where}", params)
        kept_bounds.keep_removed(self.c, [text or "" for (text,) in gone])

    def _expire_past(self, limit: int) -> None:
        (last,) = self.c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'index_log'").fetchone()
        if last > limit:
            for table in ("hot_words", "prefix_words"):  # the prefixes' postings (prefixes.py) share the log
                self.c.execute(f"UPDATE {table} SET log_seq = -1 WHERE log_seq >= 0 AND log_seq < ?",
                               (last - FRESH_LIMIT,))
            self.cut_log()

    def cut_log(self) -> None:
        """Drop the log rows every usable build holds; with none usable, stop listing."""
        (oldest,) = self.c.execute(
            "SELECT min(s) FROM (SELECT log_seq AS s FROM hot_words WHERE log_seq >= 0 "
            "UNION ALL SELECT log_seq FROM prefix_words WHERE log_seq >= 0)").fetchone()
        if oldest is None:
            self.c.execute("UPDATE meta SET value = 0 WHERE key = 'index_log'")
            self.c.execute("DELETE FROM index_log")
            self.c.execute("DELETE FROM index_gone")
        else:
            self.c.execute("UPDATE meta SET value = ? WHERE key = 'index_log'", (oldest + FRESH_LIMIT,))
            self.c.execute("DELETE FROM index_log WHERE seq <= ?", (oldest,))
            # the deletions every usable prefix build holds (prefixes.py); none usable: kept while
            # the log runs, for a prefix build that may be reading
            self.c.execute("DELETE FROM index_gone WHERE gseq <= "
                           "(SELECT min(gone_seq) FROM prefix_words WHERE log_seq >= 0)")

    def start_index_log(self) -> None:
        """From the next indexing transaction on, rows indexed are listed (before a build reads)."""
        with self.tx() as c:
            if not self.log_limit():
                (last,) = c.execute(
                    "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'index_log'), 0)").fetchone()
                c.execute("UPDATE meta SET value = ? WHERE key = 'index_log'", (last + FRESH_LIMIT,))

    def store_hot_word(self, word: str, log_seq: int, postings: array[int]) -> None:
        """Replace `word`'s postings with those read (flat: tf, dl, rid) as of log position `log_seq`."""
        with self.tx() as c:
            row = c.execute("SELECT wno FROM hot_words WHERE word = ?", (word,)).fetchone()
            wno = row[0] if row else c.execute("SELECT coalesce(max(wno), 0) + 1 FROM hot_words").fetchone()[0]
            c.execute("DELETE FROM hot_postings WHERE wno = ?", (wno,))
            c.executemany("INSERT INTO hot_postings VALUES (?, ?, ?, ?)",
                          ((wno, postings[i], postings[i + 1], postings[i + 2]) for i in range(0, len(postings), 3)))
            tfs = sorted(set(postings[0::3]))
            c.execute("INSERT OR REPLACE INTO hot_words VALUES (?, ?, ?, ?, ?, ?)",
                      (word, wno, log_seq, json.dumps(tfs), len(postings) // 3, int(time.time() * 1000)))
            if self.log_limit():  # else the log was given up while this build read: it holds no rows
                self.cut_log()
            else:
                c.execute("UPDATE hot_words SET log_seq = -1 WHERE word = ?", (word,))

    def drop_hot_words(self, keep: set[str]) -> list[str]:
        """Drop the postings of words not in `keep`; with none left, stop the log. Returns those dropped."""
        with self.tx() as c:
            gone = [(w, n) for w, n in c.execute("SELECT word, wno FROM hot_words") if w not in keep]
            for word, wno in gone:
                c.execute("DELETE FROM hot_postings WHERE wno = ?", (wno,))
                c.execute("DELETE FROM hot_words WHERE word = ?", (word,))
            self.cut_log()
            return [w for w, _ in gone]


# -- searching (a reader connection, inside one read transaction) --------------------------------

async def hot_top(conn: aiosqlite.Connection, token: str, match: str | None, k: int, where: list[str],
                  params: dict[str, Any]) -> list[tuple[Any, ...]] | None:
    """The exact top `k` (rid, bm25) of a one-word query within `where`, best first (bm25, then
    newest, then message id); None when the word has no usable postings (search FTS5 alone)."""
    head = await fetch_all(conn,
        "SELECT h.wno, h.log_seq, h.tfs, (SELECT seq FROM sqlite_sequence WHERE name = 'index_log'), "
        "(SELECT block FROM msg_fts_data WHERE id = 1) FROM hot_words h WHERE h.word = ?", (token,))
    if not head:
        return None
    wno, log_seq, tfs, last_seq, averages = head[0]
    if log_seq < 0 or (last_seq or 0) - log_seq > FRESH_LIMIT:  # stale: too much was indexed since
        return None
    avgdl = average_length(averages)
    tfs = json.loads(tfs)

    def score(tf: int, dl: int) -> float:
        return tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))

    pages: dict[int, list[tuple[int, int]]] = {tf: [] for tf in tfs}  # fetched, not yet merged
    done: set[int] = set()  # tf runs read to their end
    after: dict[int, tuple[int, int]] = {}  # per tf, the last (dl, rid) fetched
    heap: list[tuple[float, int, int, int]] = []  # (-score, dl, rid, tf): the head of each run

    async def fetch(wanted: list[int]) -> None:
        got: dict[int, list[tuple[int, int]]] = {tf: [] for tf in wanted}
        for start in range(0, len(wanted), 100):  # SQLite allows 500 terms in a compound SELECT
            parts, args = [], []
            for tf in wanted[start:start + 100]:
                dl, rid = after.get(tf, (-1, -1))
                parts.append("SELECT * FROM (SELECT tf, dl, rid FROM hot_postings WHERE wno = ? AND tf = ? "
                             "AND (dl, rid) > (?, ?) ORDER BY dl, rid LIMIT ?)")
                args += [wno, tf, dl, rid, PAGE]
            for tf, dl, rid in await fetch_all(conn, " UNION ALL ".join(parts), args):
                got[tf].append((dl, rid))
        for tf in wanted:
            if len(got[tf]) < PAGE:
                done.add(tf)
            if got[tf]:
                after[tf] = got[tf][-1]
                pages[tf] = got[tf][::-1]  # popped from the end

    def advance(tf: int) -> None:
        if pages[tf]:
            dl, rid = pages[tf].pop()
            heapq.heappush(heap, (-score(tf, dl), dl, rid, tf))

    await fetch(tfs)
    for tf in tfs:
        advance(tf)
    found: dict[int, tuple[Any, ...]] = {}  # rid -> (rid, bm25, ts, mid, listed since the build)
    taken_scores: dict[int, float] = {}
    want = k
    for round_ in range(MAX_ROUNDS):
        batch: list[int] = []
        while heap and (len(batch) < want or -heap[0][0] >= taken_scores.get(batch[-1], 0) * (1 - EPS)):
            neg, _dl, rid, tf = heapq.heappop(heap)
            batch.append(rid)
            taken_scores[rid] = -neg
            if not pages[tf] and tf not in done:
                await fetch([tf])
            advance(tf)
        sql = ("SELECT rowid, bm25(msg_fts), ts, mid, rowid IN (SELECT rid FROM index_log WHERE seq > :log_seq) "
               "FROM msg_fts WHERE " + " AND ".join(["msg_fts MATCH :match",
                                                     "+rowid IN (SELECT value FROM json_each(:ids)"
                                                    + (" UNION ALL SELECT rid FROM index_log WHERE seq > :log_seq)"
                                                       if round_ == 0 else ")"), *where]))
        for row in await fetch_all(conn, sql, {**params, "match": match, "ids": json.dumps(batch),
                                                      "log_seq": log_seq}):
            found[row[0]] = row
        # rows listed since the build may hold other text than their postings say: their
        # scores come from FTS5 alone and never bound what is left in the postings
        bounds = sorted((taken_scores[rid] for rid, row in found.items() if rid in taken_scores and not row[4]),
                        reverse=True)
        if not heap or (len(bounds) >= k and -heap[0][0] < bounds[k - 1] * (1 - EPS)):
            hits = sorted(found.values(), key=lambda r: (r[1], -r[2], r[3]))
            return [(r[0], r[1]) for r in hits[:k]]
        want *= 4
    return None  # a narrow scope: most rows taken were outside it
