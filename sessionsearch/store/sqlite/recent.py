"""`recent` (newest first) without sorting every match, and the bm25 of the rows it shows.

Row ids are packed by window (rowids.py), so FTS5's rowid order is not time order, and sorting
every match by timestamp costs ~2 µs a match (45 ms for a word in 10% of 200,000 messages). But
each window keeps `ts_max`, a bound on the timestamps of its messages (migration 10, raised by
each append and recomputed by a restore). The sorter of an arm then runs in two steps of one
statement:

1. The last k + margin matches in rowid order, the walk bare FTS5's `ORDER BY rowid DESC` does
   without reading a row; T is the oldest timestamp among them. At least k + margin matches are
   at least as new as T, so the answer is among the matches with ts >= T.
2. Those live in windows whose `ts_max` >= T, all at or above the lowest such window's first row
   id: FTS5 walks the doclist from there (a pushed-down rowid bound) and the sorter keeps the
   rows with ts >= T. Windows are mostly written one after another, so that is the last few.

A window written over a long time (an old session still active) widens step 2 down to its
first row; at worst it is the whole doclist again, the cost of sorting every match.

The bm25 of the shown rows, which `recent` reports as the score, needs each phrase's document
count over the whole index: FTS5's bm25() counts it by walking the phrase's doclist (7 ms for a
10% word at 1,000,000 messages), in every statement. `RecentScores` counts it once per state of
the index (its structure and averages records, which every write changes) and computes bm25 as
FTS5 does, from the row's size (docsize), the averages, and the row's phrase instances, counted
in its text by a scratch in-memory FTS5 table of the same definition (highlight marks each).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import OrderedDict

from ..base import Match
from .fts import fts5_match, quote
from .hot import average_length, varint, varint_sum

K1, B = 1.2, 0.75  # FTS5's bm25() defaults
MIN_TS = -(1 << 63)
COUNTS_KEPT = 4096  # document counts cached per store (a phrase each)
MARK = "\x01"  # highlight's opening mark: one character per phrase instance


def recent_sorter(n: int, source: str, where: list[str], ts_join: str) -> tuple[str, str]:
    """(CTE, sorter) of arm `n` (its FROM clause and conditions), as described above. When the
    walk of step 1 saw every match (fewer than k + margin) they are sorted as they are, and
    step 2 opens no FTS5 cursor at all (an empty table joined first); when a row it saw shows no
    timestamp (its transcript row is gone), step 2 sorts every match."""
    cond = " AND ".join(["msg_fts MATCH :match", *where])
    cte = (f"last_{n} AS MATERIALIZED (SELECT msg_fts.rowid AS id FROM {source} WHERE {cond} "
           "ORDER BY msg_fts.rowid DESC LIMIT :k2), "
           f"floor_{n} AS MATERIALIZED (SELECT count(*) AS seen, CASE WHEN count(t.ts) = :k2 THEN min(t.ts) END AS ts "
           f"FROM last_{n} LEFT JOIN events AS t INDEXED BY events_ts ON t.id = last_{n}.id AND t.text IS NOT NULL), "
           f"bound_{n} AS MATERIALIZED (SELECT coalesce(f.ts, {MIN_TS}) AS ts, coalesce((SELECT min(wid) FROM windows "
           f"INDEXED BY windows_by_ts_max WHERE ts_max >= f.ts) << 17, 0) AS lo FROM floor_{n} f WHERE f.seen = :k2)")
    sorter = (f"SELECT * FROM (SELECT l.id, t.ts AS key, NULL AS score FROM last_{n} l JOIN events AS t INDEXED BY "
              f"events_ts ON t.id = l.id AND t.text IS NOT NULL WHERE (SELECT seen FROM floor_{n}) < :k2 "
              f"UNION ALL SELECT msg_fts.rowid AS id, t.ts AS key, NULL AS score FROM bound_{n} CROSS JOIN "
              f"{source}{ts_join} WHERE {cond} AND msg_fts.rowid >= bound_{n}.lo AND t.ts >= bound_{n}.ts "
              "ORDER BY key DESC LIMIT :k2)")
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


class RecentScores:
    """bm25 of a few rows of a search, with each phrase's document count counted once per state
    of the index (cached per store, as the reader connections see it)."""

    def __init__(self) -> None:
        self._counts: OrderedDict[str, tuple[bytes, int]] = OrderedDict()  # phrase -> (index state, count)
        self._scratch: _Counter | None = None

    async def scores(self, conn, match: Match, ids: list[int]) -> dict[int, float] | None:
        """{row id: bm25} of `ids`, every one matching `match`; None when that cannot be told
        this way (the caller asks FTS5)."""
        parts = phrases(match)
        if parts is None or not ids:
            return None
        # one snapshot: the index state and schema, then each row's size and text (no MATCH: an
        # FTS5 rowid lookup under MATCH reads the word's whole doclist again, ~0.2 ms each)
        rows = await conn.execute_fetchall(
            "SELECT -2, (SELECT block FROM msg_fts_data WHERE id = 10), (SELECT block FROM msg_fts_data WHERE id = 1), "
            "(SELECT sql FROM sqlite_master WHERE name = 'msg_fts') UNION ALL "
            "SELECT -1, id, sz, NULL FROM msg_fts_docsize WHERE id IN (SELECT value FROM json_each(:ids)) UNION ALL "
            "SELECT 0, rowid, text, NULL FROM msg_fts WHERE rowid IN (SELECT value FROM json_each(:ids))",
            {"ids": json.dumps(ids)})
        _, structure, averages, schema = rows[0]
        size = {rid: varint_sum(sz) for part, rid, sz, _ in rows[1:] if part == -1}
        texts = [(rid, text) for part, rid, text, _ in rows[1:] if part == 0]
        counter = self._counter(schema)
        if averages is None or counter is None or len(size) != len(ids) or len(texts) != len(ids):
            return None  # a row no longer indexed, or an index of another form: FTS5 decides
        freq = counter.frequencies(texts, parts)
        if any(0.0 in f for f in freq.values()):
            return None  # a row no longer matching
        state = structure + averages
        n_rows = max(1, varint(averages, 0)[0])
        avgdl = average_length(averages)
        idf = []
        for phrase in parts:
            hits = await self._count(conn, phrase, state)
            if hits is None:
                return None
            value = math.log((n_rows - hits + 0.5) / (hits + 0.5))
            idf.append(value if value > 0.0 else 1e-6)
        out = {}
        for rid in ids:
            d = float(size[rid])
            score = 0.0
            for i, f in enumerate(freq[rid]):  # the operations of FTS5's fts5Bm25Function, in its order
                score += idf[i] * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * d / avgdl)))
            out[rid] = -1.0 * score
        return out

    def _counter(self, schema: str | None) -> "_Counter | None":
        if schema is None:
            return None
        if self._scratch is None or self._scratch.schema != schema:
            self._scratch = _Counter.for_schema(schema)
        return self._scratch

    async def _count(self, conn, phrase: str, state: bytes) -> int | None:
        """The rows matching `phrase` in the index state `state`; None when the index moved on
        since `state` was read (a write came in between)."""
        cached = self._counts.get(phrase)
        if cached is not None and cached[0] == state:
            self._counts.move_to_end(phrase)
            return cached[1]
        rows = await conn.execute_fetchall(
            "SELECT (SELECT block FROM msg_fts_data WHERE id = 10), (SELECT block FROM msg_fts_data WHERE id = 1), "
            "(SELECT count(*) FROM msg_fts WHERE msg_fts MATCH ?)", (phrase,))
        if rows[0][0] + rows[0][1] != state:
            return None
        self._counts[phrase] = (state, rows[0][2])
        self._counts.move_to_end(phrase)
        while len(self._counts) > COUNTS_KEPT:
            self._counts.popitem(last=False)
        return rows[0][2]


class _Counter:
    """Phrase instances in a few texts, counted by an in-memory FTS5 table made with the index's
    own definition (so the same tokenizer): each instance highlighted once, one mark each."""

    COLUMNS = ["text", "ts", "mid"]  # the index's columns this counts for; any other form: None

    def __init__(self, schema: str, conn: sqlite3.Connection) -> None:
        self.schema = schema
        self.conn = conn

    @classmethod
    def for_schema(cls, schema: str) -> "_Counter | None":
        using = schema.upper().find(" USING ")
        if using < 0:
            return None
        conn = sqlite3.connect(":memory:")
        try:
            conn.execute("CREATE VIRTUAL TABLE scratch" + schema[using:])
            columns = [r[1] for r in conn.execute("PRAGMA table_info(scratch)")]
        except sqlite3.Error:
            conn.close()
            return None
        if columns != cls.COLUMNS:
            conn.close()
            return None
        return cls(schema, conn)

    def frequencies(self, texts: list[tuple[int, str]], parts: list[str]) -> dict[int, list[float]]:
        """{row id: [instances of each phrase]} of `texts` (row id, text)."""
        freq = {rid: [0.0] * len(parts) for rid, _ in texts}
        c = self.conn
        c.execute("DELETE FROM scratch")
        c.executemany("INSERT INTO scratch (rowid, text) VALUES (?, ?)", texts)
        for i, phrase in enumerate(parts):
            for rid, n in c.execute(f"SELECT rowid, length(highlight(scratch, 0, '{MARK}', '')) - length(text) "
                                    "FROM scratch WHERE scratch MATCH ?", (phrase,)):
                freq[rid][i] = float(n)
        return freq
