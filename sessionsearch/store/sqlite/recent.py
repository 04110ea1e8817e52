"""`recent` (newest first) without sorting every match, and the bm25 of the rows it shows.

Row ids are packed by window (rowids.py), so FTS5's rowid order is not time order, and sorting
every match by timestamp costs time in every match. But
each window keeps `ts_max`, a bound on the timestamps of its messages (migration 10, raised by
each append and recomputed by a restore). The sorter of an arm then runs in two steps of one
statement:

1. The last k + 1 matches in rowid order, the walk bare FTS5's `ORDER BY rowid DESC` does, with
   their timestamps; T is the oldest among them. At least k + 1 matches are at least as new as T,
   so the matches with ts >= T hold the top k, every match tied with the k-th, and one more (that
   more matched): all the sorter's margin is for (ranking.py, `cut`).
2. Those live in windows whose `ts_max` >= T, all at or above the lowest such window's first row
   id: FTS5 walks the doclist from there up to the rows step 1 saw (a pushed-down rowid range),
   and the sorter keeps the rows with ts >= T, and step 1's. Windows are mostly written one after
   another, so that is the last few, often none below step 1's rows.

A window written over a long time (an old session still active) widens step 2 down to its
first row; at worst it is the whole doclist again, the cost of sorting every match.

Most often step 2's range is the part of step 1's oldest window below its rows, where messages
are older than T: when at most SPAN_READ messages lie in that range and none is as new as T
(read from the narrow (id, ts) index), step 2 is skipped, and with it the second FTS5 cursor,
whose opening looks the word up in every segment.

The bm25 of the shown rows, which `recent` reports as the score, needs each phrase's document
count over the whole index: FTS5's bm25() counts it by walking the phrase's doclist, in every
statement. `RecentScores` counts it once per state of
the index (its structure and averages records, which every write changes) and computes bm25 as
FTS5 does, from the row's size (docsize), the averages, and the row's phrase instances: counted
in Python in ASCII text, as unicode61 tokenizes it, and in other text by a scratch in-memory FTS5
table of the same definition (highlight marks each). The ranking statement reads the sizes, the
index's text of non-ASCII rows and the index state beside the rows it ranks (SHOWN_COLUMNS,
STATE_ROW), so scoring them costs no statement but a count on a new state of the index.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections import OrderedDict
from dataclasses import dataclass, field

import aiosqlite

from ..base import Match
from .bm25 import average_length, varint, varint_sum
from .fetch import fetch_all
from .fts import ascii_sql, fts5_match, quote

K1, B = 1.2, 0.75  # FTS5's bm25() defaults
MIN_TS = -(1 << 63)
SPAN_READ = 1024  # messages step 2's range may hold for it to be skipped without a walk (see above)
COUNTS_KEPT = 4096  # document counts cached per store (a phrase each)
MARK = "\x01"  # highlight's opening mark: one character per phrase instance
# non-ASCII chunks of text kept with their tokens, per store (_Counter): ~3.5 MB at most, of short words
CHUNKS_KEPT = 16384
CHUNK_CHARS = 32  # longer chunks are tokenized each time, not kept
# unicode61 (remove_diacritics 2) on ASCII text: a token is a run of letters and digits, folded to
# lower case, so an ASCII phrase of one such token is counted in ASCII text without the tokenizer
UNICODE61 = "tokenize = 'unicode61 remove_diacritics 2')"
ASCII_TOKEN = re.compile(r"[0-9a-z]+")
ASCII_PHRASE = re.compile(r'"([0-9A-Za-z]+)"( \*)?')


def recent_sorter(n: int, source: str, where: list[str], ts_join: str) -> tuple[str, str]:
    """(CTE, sorter) of arm `n` (its FROM clause and conditions), as described above; `:k1` is
    k + 1, `:k2` the sorter's limit. Step 1 reads the timestamps of the rows it walks; step 2
    walks only below them (every match above the oldest was among them) and the sorter takes
    step 1's rows as they are. When step 1 saw every match (fewer than k + 1) step 2 opens no
    FTS5 cursor at all (an empty table joined first); when a row it saw shows no timestamp (its
    transcript row is gone), step 2 walks every match below."""
    cond = " AND ".join(["msg_fts MATCH :match", *where])
    cte = (f"last_{n} AS MATERIALIZED (SELECT msg_fts.rowid AS id, t.ts AS ts FROM {source} LEFT JOIN events AS t "
           "INDEXED BY events_ts ON t.id = msg_fts.rowid AND t.text IS NOT NULL "
           f"WHERE {cond} ORDER BY msg_fts.rowid DESC LIMIT :k1), "
           f"bound_{n} AS MATERIALIZED (SELECT * FROM (SELECT coalesce(f.ts, {MIN_TS}) AS ts, "
           f"coalesce((SELECT min(wid) "
           f"FROM windows INDEXED BY windows_by_ts_max WHERE ts_max >= f.ts) << 17, 0) AS lo, f.hi FROM (SELECT "
           f"count(*) AS seen, CASE WHEN count(ts) = :k1 THEN min(ts) END AS ts, min(id) AS hi FROM last_{n}) f "
           f"WHERE f.seen = :k1) b WHERE (SELECT count(*) > {SPAN_READ} OR max(s.ts) >= b.ts "
           f"FROM (SELECT ts FROM events "
           f"INDEXED BY events_ts WHERE id >= b.lo AND id < b.hi AND text IS NOT NULL LIMIT {SPAN_READ + 1}) s))")
    sorter = (f"SELECT * FROM (SELECT id, ts AS key, NULL AS score FROM last_{n} WHERE ts IS NOT NULL "
              f"UNION ALL SELECT msg_fts.rowid AS id, t.ts AS key, NULL AS score FROM bound_{n} CROSS JOIN "
              f"{source}{ts_join} WHERE {cond} AND msg_fts.rowid >= bound_{n}.lo AND msg_fts.rowid < bound_{n}.hi "
              f"AND t.ts >= bound_{n}.ts ORDER BY key DESC LIMIT :k2)")
    return cte, sorter


def phrases(match: Match) -> list[str] | None:
    """The FTS5 phrases of a match, each one word whose instances never overlap (so that
    highlight marks each once); None when the match is not of that form (score with FTS5)."""
    if not match.words or not all(w.isalnum() for w in match.words):
        return None
    out = [quote(w) for w in match.words]
    if match.prefix:
        out[-1] += " *"
    return out if " AND ".join(out) == fts5_match(match) else None


# What the scores need of the rows a `recent` search shows, read by its ranking statement
# (ranking.py) beside each ranked row: the row's size, and the text the index holds for it when
# that is not the message's own (non-ASCII text: store/cjk.py folds it and shadows CJK runs), from
# FTS5's content table (c0: the text column, which _Counter checks comes first; a lookup through
# msg_fts itself opens an FTS5 cursor per row). Then one more row: the index state
# and definition. So the scores cost no statement of their own.
SHOWN_COLUMNS = ("(SELECT sz FROM msg_fts_docsize WHERE id = top.id), "
                 f"CASE WHEN NOT {ascii_sql('e.text')} THEN (SELECT c0 FROM msg_fts_content WHERE id = top.id) END")
STATE_ROW = ("SELECT NULL, NULL, NULL, NULL, (SELECT block FROM msg_fts_data WHERE id = 10), "
             "(SELECT block FROM msg_fts_data WHERE id = 1), (SELECT sql FROM sqlite_master WHERE name = 'msg_fts')")


@dataclass
class ShownIndex:
    """The index's view of the ranked rows (SHOWN_COLUMNS, STATE_ROW), as the ranking read it."""

    structure: bytes | None = None
    averages: bytes | None = None
    schema: str | None = None
    rows: dict[int, tuple[bytes | None, str | None]] = field(default_factory=dict)  # id -> (docsize, text)


class RecentScores:
    """bm25 of a few rows of a search, with each phrase's document count counted once per state
    of the index (cached per store, as the reader connections see it)."""

    def __init__(self) -> None:
        self._counts: OrderedDict[str, tuple[bytes, int]] = OrderedDict()  # phrase -> (index state, count)
        self._scratch: _Counter | None = None

    async def scores(self, conn: aiosqlite.Connection, match: Match, shown: list[tuple[int, str]], index: ShownIndex
                     ) -> dict[int, float] | None:
        """{row id: bm25} of the `shown` rows (id, message text), every one matching `match`, read
        in the snapshot of `index`; None when that cannot be told this way (the caller asks FTS5)."""
        parts = phrases(match)
        if parts is None or not shown:
            return None
        size, texts = {}, []
        for rid, text in shown:
            sz, index_text = index.rows.get(rid, (None, None))
            if sz is None or (index_text is None and not text.isascii()):
                return None  # a row no longer indexed
            size[rid] = varint_sum(sz)
            texts.append((rid, text if index_text is None else index_text))  # ASCII: the index holds it as it is
        counter = self._counter(index.schema)
        if index.structure is None or index.averages is None or counter is None:
            return None  # an index of another form: FTS5 decides
        freq = counter.frequencies(texts, parts, matching=True)
        if any(0.0 in f for f in freq.values()):
            return None  # a row no longer matching
        state = index.structure + index.averages
        n_rows = max(1, varint(index.averages, 0)[0])
        avgdl = average_length(index.averages)
        idf = []
        for phrase in parts:
            hits = await self._count(conn, phrase, state)
            if hits is None:
                return None
            value = math.log((n_rows - hits + 0.5) / (hits + 0.5))
            idf.append(value if value > 0.0 else 1e-6)
        out = {}
        for rid, _ in shown:
            d = float(size[rid])
            score = 0.0
            for i, f in enumerate(freq[rid]):  # the operations of FTS5's fts5Bm25Function, in its order
                score += idf[i] * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * d / avgdl)))
            out[rid] = -1.0 * score
        return out

    def _counter(self, schema: str | None) -> _Counter | None:
        if schema is None:
            return None
        if self._scratch is None or self._scratch.schema != schema:
            self._scratch = _Counter.for_schema(schema)
        return self._scratch

    async def _count(self, conn: aiosqlite.Connection, phrase: str, state: bytes) -> int | None:
        """The rows matching `phrase` in the index state `state`; None when the index moved on
        since `state` was read (a write came in between)."""
        cached = self._counts.get(phrase)
        if cached is not None and cached[0] == state:
            self._counts.move_to_end(phrase)
            return cached[1]
        rows = await fetch_all(conn,
            "SELECT (SELECT block FROM msg_fts_data WHERE id = 10), (SELECT block FROM msg_fts_data WHERE id = 1), "
            "(SELECT count(*) FROM msg_fts WHERE msg_fts MATCH ?)", (phrase,))
        if rows[0][0] + rows[0][1] != state:
            return None
        self._counts[phrase] = (state, rows[0][2])
        self._counts.move_to_end(phrase)
        while len(self._counts) > COUNTS_KEPT:
            self._counts.popitem(last=False)
        count: int | None = rows[0][2]
        return count


def _ascii_count(folded: str, term: str, prefix: bool, matching: bool) -> int:
    """Tokens of lower-cased ASCII text that are `term` (or start with it, `prefix`); `matching`:
    the text holds at least one, so a single occurrence of `term` in it is that token."""
    if matching and folded.count(term) == 1:
        return 1
    tokens = ASCII_TOKEN.findall(folded)
    return sum(t.startswith(term) for t in tokens) if prefix else tokens.count(term)


class _Counter:
    """Phrase instances in a few texts, counted by an in-memory FTS5 table made with the index's
    own definition (so the same tokenizer): each instance highlighted once, one mark each; or,
    for ASCII words, from the tokens that table's tokenizer makes of each chunk of the text,
    kept per chunk (see frequencies)."""

    COLUMNS = ["text", "ts", "mid"]  # the index's columns this counts for; any other form: None

    def __init__(self, schema: str, conn: sqlite3.Connection) -> None:
        self.schema = schema
        self.conn = conn
        self._chunks: OrderedDict[str, tuple[str, ...]] = OrderedDict()  # chunk -> its folded tokens

    @classmethod
    def for_schema(cls, schema: str) -> _Counter | None:
        using = schema.upper().find(" USING ")
        if using < 0:
            return None
        conn = sqlite3.connect(":memory:", isolation_level=None)  # transactions as frequencies() opens them
        try:
            conn.execute("CREATE VIRTUAL TABLE scratch" + schema[using:])
            conn.execute("CREATE VIRTUAL TABLE scratch_tokens USING fts5vocab(scratch, 'instance')")
            columns = [r[1] for r in conn.execute("PRAGMA table_info(scratch)")]
        except sqlite3.Error:
            conn.close()
            return None
        if columns != cls.COLUMNS:
            conn.close()
            return None
        return cls(schema, conn)

    def frequencies(self, texts: list[tuple[int, str]], parts: list[str], matching: bool = False
                    ) -> dict[int, list[float]]:
        """{row id: [instances of each phrase]} of `texts` (row id, text); `matching`: every text
        is known to match every phrase (the index found it so).

        When every phrase is one ASCII word (or its prefix) and the index tokenizes with plain
        unicode61, ASCII texts are counted here, as that tokenizer splits and folds them: a tenth
        of the scratch table's cost a text, and less
        for a matching text that holds the word once (most): it holds it as a token at least
        once, so one occurrence in the text is the one.

        Other texts (diacritics, CJK shadows) are split at whitespace, which unicode61 never keeps
        in a token (str.split() splits at Unicode white space only: separators to it too), so a
        text's tokens are its chunks' tokens: ASCII chunks are tokenized here, the others by the
        scratch table's tokenizer (an fts5vocab table lists each row's tokens as FTS5 folds them),
        and kept: the accented words and CJK shadow tokens of a transcript recur, and the scratch
        table's fixed cost (a transaction) is then spent only on chunks not seen before."""
        freq = {rid: [0.0] * len(parts) for rid, _ in texts}
        words = [ASCII_PHRASE.fullmatch(p) for p in parts] if UNICODE61 in self.schema else [None]
        if all(words):
            terms = [(m[1].lower(), bool(m[2])) for m in words]  # type: ignore[index]
            other = []
            for rid, text in texts:
                if text.isascii():
                    folded = text.lower()
                    freq[rid] = [float(_ascii_count(folded, term, prefix, matching)) for term, prefix in terms]
                else:
                    other.append((rid, text.split()))
            if other:
                tokens = self._tokens({chunk for _, chunks in other for chunk in chunks if not chunk.isascii()})
                for rid, chunks in other:
                    found = ASCII_TOKEN.findall(" ".join(c for c in chunks if c.isascii()).lower())
                    for chunk in chunks:
                        if not chunk.isascii():
                            found += tokens[chunk]
                    freq[rid] = [float(sum(t.startswith(term) for t in found) if prefix else found.count(term))
                                 for term, prefix in terms]
            return freq
        # rolled back, so the table is always empty: deleting the last texts instead cost FTS5 a
        # delete marker per token and a growing index to merge
        c = self.conn
        c.execute("BEGIN")
        try:
            c.executemany("INSERT INTO scratch (rowid, text) VALUES (?, ?)", texts)
            for i, phrase in enumerate(parts):
                for rid, n in c.execute(f"SELECT rowid, length(highlight(scratch, 0, '{MARK}', '')) - length(text) "
                                        "FROM scratch WHERE scratch MATCH ?", (phrase,)):
                    freq[rid][i] = float(n)
        finally:
            c.execute("ROLLBACK")
        return freq

    def _tokens(self, chunks: set[str]) -> dict[str, tuple[str, ...]]:
        """{chunk: its tokens as the index's tokenizer folds them} of non-ASCII chunks of text:
        those kept from earlier calls, the others through the scratch table (one transaction)."""
        out, todo = {}, []
        for chunk in chunks:
            kept = self._chunks.get(chunk)
            if kept is None:
                todo.append(chunk)
            else:
                self._chunks.move_to_end(chunk)
                out[chunk] = kept
        if todo:
            found: dict[int, list[tuple[int, str]]] = {n: [] for n in range(1, len(todo) + 1)}
            c = self.conn
            c.execute("BEGIN")
            try:
                c.executemany("INSERT INTO scratch (rowid, text) VALUES (?, ?)", enumerate(todo, 1))
                for n, term, offset in c.execute("SELECT doc, term, offset FROM scratch_tokens"):
                    found[n].append((offset, term))
            finally:
                c.execute("ROLLBACK")
            for n, chunk in enumerate(todo, 1):
                out[chunk] = tuple(term for _, term in sorted(found[n]))
                if len(chunk) <= CHUNK_CHARS:
                    self._chunks[chunk] = out[chunk]
            while len(self._chunks) > CHUNKS_KEPT:
                self._chunks.popitem(last=False)
        return out
