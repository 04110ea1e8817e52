"""Building the postings of an agent's common words and 1-8 letter prefixes (postings.py reads
them), and telling when a build is due.

A build never blocks a writer. It takes a mark from the index rows' sequence (migration 5) and
the next transaction id, waits until every transaction with an older id has ended (each row
numbered at or below the mark was numbered after its transaction took an id, so it is then
committed or gone), and reads in one REPEATABLE READ snapshot taken after that: every row at or
below the mark is in the snapshot, and the rows above it are the "fresh" rows a search scores
on its own. The words and prefixes are chosen from `ts_stat` (in C, over the rows' tsvectors);
one pass over the rows' term counts (jsonb `tf`) then keeps, per word and per prefix and per run
of equal frequency, the CAP shortest rows (of those, the KEEP best by score at the build, and
each run's first), each run's first row left out, and the rows holding it; and per word in
RECENT_MIN_DOCS rows its RECENT_KEEP newest rows (ts, id) among the agent's newest rows (those
newer than a cutoff), for `recent` (recent.py, kept_ctes), stored as kind RECENT in the same
table: `ids` the rows newer than the floor, `cut` {"floor": the RECENT_KEEP-th newest ts, or the
cutoff when fewer were newer, or null when every row of the word is kept}. The read holds no
transaction id, so two builds never wait for each other; the postings are written afterwards in
one short transaction under the agent's advisory lock.

Due (`postings_due`): never while windows wait for reconciliation (the index is being
rewritten); else when no build ran and the agent holds `min_docs` rows ("first"), when it grew
by `grow_share` ("grown", whatever else holds), or when a build is no longer usable or about to stop being so:
rows at or below its mark were deleted or rewritten (a rewind, a reconciliation, a delete) or
half the fresh budget is used ("stale"). A build always redoes the whole agent: its cost is
the pass over the rows, whichever words it keeps.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import time
from typing import Any

import psycopg

from ..prefix_choice import choose_prefixes
from .db import Db, Reader, all_rows, the_row
from .terms import K1, MAX_LEN, MIN_LEN, PREFIX, PREFIX_FRESH_LIMIT, RECENT, WORD, B, is_prefix_key

CAP = 128  # rows kept per run of equal frequency: an unscoped top 25 rarely reaches past a few dozen
KEEP = 512  # rows kept per word or prefix, the best by score at the build (and each run's first)
MIN_DOCS = 5_000  # a word is built when in at least this many rows (search.postingsMinDocs) …
MIN_SHARE = 0.005  # … and this share of them, …
MAX_WORDS = 512  # … the most frequent first
PREFIX_MIN_DOCS = 2_000  # a prefix is built when its words are in this many rows (summed) …
MAX_PREFIXES = 4096  # … the most frequent first
WAIT_S = 600.0  # the longest a build waits for the transactions older than its mark
RECENT_MIN_DOCS = 1_000  # a word (CJK shadow tokens too) in this many rows keeps its newest rows (recent.py) …
RECENT_MAX_WORDS = 8192  # … the most frequent first, …
RECENT_KEEP = 256  # … this many of them (fewer when the oldest kept shares its timestamp), …
RECENT_SPAN = 1.0  # … of its rows newer than the cutoff, the newest RECENT_SPAN * RECENT_KEEP / RECENT_MIN_DOCS
# of the agent's rows (about RECENT_KEEP rows of a word in RECENT_MIN_DOCS spread evenly in time): the
# rows older than it cost the pass nothing more
LOCK = 0x706F7374  # advisory lock key space ("post"), with the agent number as the second key


Key = tuple[int, str]  # (WORD or PREFIX, the word or prefix)


class Runs:
    """Per word and prefix: the rows holding it (docs) and, per run of equal frequency, its CAP + 1
    shortest rows (max-heaps of (-dl, -id)); per word of `recent`, its newest rows (ts, id): one
    pass over the rows' term counts fills them. Each word and prefix is a slot number, and each
    term maps to the slots it counts for and the newest-rows list it adds to (ints hash fastest:
    this is a build's hot loop)."""

    def __init__(self, words: set[str], prefixes: set[str], recent: dict[str, int] | None = None,
                 cutoff: int | None = None) -> None:
        self.keys: list[Key] = [(WORD, w) for w in sorted(words)] + [(PREFIX, p) for p in sorted(prefixes)]
        self._slot = {key: i for i, key in enumerate(self.keys)}
        self.docs = [0] * len(self.keys)
        self.runs: list[dict[int, list[tuple[int, int]]]] = [{} for _ in self.keys]
        self.newest: dict[str, list[tuple[int, int]]] = {w: [] for w in sorted(recent or {})}  # (ts, id)
        self._recent_docs = dict(recent or {})  # word -> its rows (ts_stat's count)
        self.cutoff = cutoff  # the newest rows are taken among those newer than this (None: all)
        self._targets: dict[str, tuple[tuple[int, ...], list[Any] | None]] = {}  # term -> (slots, newest list)

    def _targets_of(self, term: str) -> tuple[tuple[int, ...], list[Any] | None]:
        keys = [(WORD, term)] + [(PREFIX, term[:n]) for n in range(MIN_LEN, min(MAX_LEN, len(term)) + 1)]
        found = tuple(self._slot[k] for k in keys if k in self._slot), self.newest.get(term)
        self._targets[term] = found
        return found

    def count(self, batch: list[tuple[int, int, dict[str, int], int]]) -> None:
        """Add rows (id, dl, {term: count}, ts)."""
        targets, docs, runs, cap = self._targets, self.docs, self.runs, CAP
        cutoff = -(1 << 63) if self.cutoff is None else self.cutoff
        for rid, dl, tf, ts in batch:
            new = ts > cutoff
            freq: dict[int, int] = {}
            for term, n in tf.items():
                found = targets.get(term)
                if found is None:
                    found = self._targets_of(term)
                slots, newest = found
                if new and newest is not None:
                    newest.append((ts, rid))
                for slot in slots:
                    freq[slot] = freq.get(slot, 0) + n
            item = (-dl, -rid)
            for slot, n in freq.items():
                docs[slot] += 1
                heap = runs[slot].get(n)
                if heap is None:
                    runs[slot][n] = [item]
                elif len(heap) <= cap:
                    heapq.heappush(heap, item)
                elif item > heap[0]:
                    heapq.heapreplace(heap, item)
        for rows in self.newest.values():  # a few sorts a batch, in C, rather than a heap step a row
            if len(rows) > 2 * RECENT_KEEP:
                rows.sort(reverse=True)
                del rows[RECENT_KEEP:]

    def finish(self, avgdl: float) -> dict[Key, tuple[int, dict[str, int | None], list[int], list[int], list[int]]]:
        """{key: (docs, {tf: length of the run's first row left out}, ids, tfs, dls of the rows kept)};
        per word of `recent` ({word: its rows}), {(RECENT, word): (its rows, {"floor": ts or None},
        ids, [], [])}."""
        out = {key: _kept(self.docs[i], {tf: sorted((-d, -r) for d, r in heap) for tf, heap in self.runs[i].items()},
                          avgdl) for i, key in enumerate(self.keys) if self.docs[i]}
        for word, rows in self.newest.items():
            if rows:
                out[(RECENT, word)] = _newest(self._recent_docs[word], rows, self.cutoff)
        return out


def _newest(docs: int, rows: list[tuple[int, int]], cutoff: int | None) -> tuple[int, dict[str, int | None],
                                                                                list[int], list[int], list[int]]:
    """A word's newest rows, as stored: when fewer than RECENT_KEEP were newer than the cutoff, all
    those (floor: the cutoff; None when there was none: every row of the word), else the rows newer
    than the RECENT_KEEP-th newest (floor: its ts). Either way the list holds every row of the word
    newer than the floor, whatever the order of rows of equal ts."""
    rows.sort(reverse=True)
    if len(rows) < RECENT_KEEP:  # never trimmed (a trim leaves RECENT_KEEP)
        return docs, {"floor": cutoff}, [rid for _, rid in rows], [], []
    floor = rows[RECENT_KEEP - 1][0]
    return docs, {"floor": floor}, [rid for ts, rid in rows[:RECENT_KEEP] if ts > floor], [], []


def _kept(docs: int, runs: dict[int, list[tuple[int, int]]],
          avgdl: float) -> tuple[int, dict[str, int | None], list[int], list[int], list[int]]:
    """The rows kept of one key's runs: each run's CAP shortest, of those the KEEP best by score at
    the build and each run's first; per run cut short, the length of its first row left out."""
    kept = [(i, tf, dl, rid) for tf, rows in runs.items() for i, (dl, rid) in enumerate(rows[:CAP])]
    if len(kept) > KEEP:
        def factor(row: tuple[int, int, int, int]) -> float:
            return row[1] / (row[1] + K1 * (1 - B + B * row[2] / avgdl))
        floor = sorted((factor(r) for r in kept), reverse=True)[KEEP - 1]
        kept = [r for r in kept if r[0] == 0 or factor(r) >= floor]
    counts: dict[int, int] = {}
    for _, tf, _, _ in kept:
        counts[tf] = counts.get(tf, 0) + 1
    cut: dict[str, int | None] = {str(tf): rows[counts[tf]][0] for tf, rows in runs.items() if counts[tf] < len(rows)}
    return docs, cut, [r[3] for r in kept], [r[1] for r in kept], [r[2] for r in kept]


async def take_mark(db: Db) -> int:
    """A mark every row numbered at or below which is committed (or gone) when this returns."""
    async def mark(conn: psycopg.AsyncConnection) -> tuple[int, int]:
        (value,) = await the_row(conn, "SELECT nextval('ss_index_iseq')")
        (xmax,) = await the_row(conn, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")  # after it
        return value, xmax
    value, xmax = await db.tx(mark)
    deadline = time.monotonic() + WAIT_S

    async def oldest(conn: psycopg.AsyncConnection) -> int:
        xmin: int = (await the_row(conn, "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"))[0]
        return xmin
    while await db.tx(oldest) < xmax:
        if time.monotonic() > deadline:
            raise TimeoutError("a transaction older than the postings build's mark is still running")
        await asyncio.sleep(0.05)
    return value


def _choose(stats: list[tuple[str, int]], n_rows: int, min_docs: int, min_share: float,
            max_words: int) -> tuple[set[str], set[str], dict[str, str]]:
    """(common words, common prefixes, {prefix: the shorter one beginning the same lexemes}) from
    each lexeme's row count (prefix_choice.py)."""
    floor = max(min_docs, int(min_share * n_rows))
    words = [(d, w) for w, d in stats if d >= floor and not w.startswith("~")]
    prefixes, same = choose_prefixes(stats, min_len=MIN_LEN, max_len=MAX_LEN, min_docs=PREFIX_MIN_DOCS,
                                     max_prefixes=MAX_PREFIXES, usable=is_prefix_key)
    return {w for _, w in sorted(words, reverse=True)[:max_words]}, prefixes, same


def _recent_words(stats: list[tuple[str, int]]) -> dict[str, int]:
    """{word: its rows} of the words that keep their newest rows: in RECENT_MIN_DOCS rows or more,
    the RECENT_MAX_WORDS most frequent (shadow tokens of CJK text too: one such token is a word)."""
    words = sorted(((d, w) for w, d in stats if d >= RECENT_MIN_DOCS), reverse=True)[:RECENT_MAX_WORDS]
    return {w: d for d, w in words}


async def _cutoff(conn: psycopg.AsyncConnection, ano: int, old_rows: int) -> int | None:
    """A timestamp about the newest RECENT_SPAN * RECENT_KEEP / RECENT_MIN_DOCS of the agent's rows are
    newer than (None: all of them), from the windows' ts_max newest first: the ts_max next below
    that of the window where their rows reach that many (a bound on each window's rows). Any value
    keeps the newest rows exact (_newest)."""
    want = int(old_rows * RECENT_SPAN * RECENT_KEEP / RECENT_MIN_DOCS)
    if want >= old_rows:
        return None
    seen, reached = 0, None
    ts_max: int
    for ts_max, rows in await all_rows(conn, "SELECT ts_max, idx_rows FROM ss_windows WHERE ano = %s AND idx_rows > 0 "
                                             "ORDER BY ts_max DESC", (ano,)):
        if reached is not None and ts_max < reached:
            return ts_max  # below every window counted (windows may share their ts_max)
        seen += rows
        if reached is None and seen >= want:
            reached = ts_max
    return None


async def read_postings(db: Db, ano: int, mark: int, *, min_docs: int, min_share: float,
                        max_words: int) -> tuple[int, dict[tuple[int, str], tuple[Any, ...]]]:
    """(the agent's rows at or below the mark, by its counters; {(kind, key): finished runs}),
    read in one snapshot taken after the mark's wait."""
    async with db.pool.connection() as conn:
        await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        try:
            old = f"m.ano = {int(ano)} AND (m.iseq IS NULL OR m.iseq <= {int(mark)})"
            counters = await the_row(conn, "SELECT coalesce(sum(idx_rows), 0)::bigint, "
                                       "coalesce(sum(idx_tokens), 0)::bigint "
                                       "FROM ss_windows WHERE ano = %s", (ano,))
            fresh = await the_row(conn, "SELECT count(*), coalesce(sum(dl), 0)::bigint FROM ss_index "
                                    "WHERE ano = %s AND iseq > %s", (ano, mark))
            old_rows, old_tokens = counters[0] - fresh[0], counters[1] - fresh[1]
            # ts_stat reads the text of a query: made of two integers here, never of user text
            stats = await all_rows(conn, "SELECT word, ndoc FROM ts_stat(%s)",
                                   (f"SELECT m.tsv FROM ss_index m WHERE {old}",))
            words, prefixes, same = _choose(stats, old_rows, min_docs, min_share, max_words)
            recent = _recent_words(stats)
            # a prefix beginning the lexemes a shorter one begins is not counted: a copy of it
            runs = Runs(words, prefixes - same.keys(), recent, await _cutoff(conn, ano, old_rows) if recent else None)
            if words or prefixes or recent:
                async with conn.cursor(name="ss_postings_build") as cur:
                    await cur.execute(f"SELECT m.id, m.dl, m.tf, m.ts FROM ss_index m WHERE {old}")
                    while batch := await cur.fetchmany(5000):
                        runs.count(batch)
        finally:
            await conn.execute("COMMIT")
    built = runs.finish(old_tokens / old_rows if old_rows else 1.0)
    built.update({(PREFIX, p): built[(PREFIX, shorter)] for p, shorter in same.items() if (PREFIX, shorter) in built})
    return old_rows, built


async def store_postings(db: Db, ano: int, mark: int, old_rows: int,
                         postings: dict[tuple[int, str], tuple[Any, ...]]) -> None:
    """Replace the agent's postings by a build's, in one transaction (a search sees either)."""
    async def write(conn: psycopg.AsyncConnection) -> None:
        await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK, ano))
        await conn.execute("DELETE FROM ss_postings WHERE ano = %s", (ano,))
        async with conn.cursor() as cur:
            async with cur.copy("COPY ss_postings (ano, kind, key, docs, cut, ids, tfs, dls) FROM STDIN") as copy:
                for (kind, key), (docs, cut, ids, tfs, dls) in postings.items():
                    await copy.write_row((ano, kind, key, docs, json.dumps(cut), ids, tfs, dls))
        await conn.execute(
            "INSERT INTO ss_postings_built VALUES (%s, %s, %s, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) "
            "ON CONFLICT (ano) DO UPDATE SET mark = EXCLUDED.mark, old_rows = EXCLUDED.old_rows, "
            "built_at = EXCLUDED.built_at", (ano, mark, old_rows))
    await db.tx(write)


async def build(db: Db, ano: int, *, min_docs: int, min_share: float, max_words: int) -> dict[str, Any]:
    """Build the agent's postings from scratch; what `optimize` reports (words: {word: its rows and
    those kept}, as SQLite's shape; prefixes and recent: how many, rows kept)."""
    started = time.monotonic()
    mark = await take_mark(db)
    old_rows, postings = await read_postings(db, ano, mark, min_docs=min_docs, min_share=min_share,
                                             max_words=max_words)
    await store_postings(db, ano, mark, old_rows, postings)
    words = {key: {"rows": p[0], "kept": len(p[2])} for (kind, key), p in postings.items() if kind == WORD}
    prefixes = [p for (kind, _), p in postings.items() if kind == PREFIX]
    recent = [p for (kind, _), p in postings.items() if kind == RECENT]
    return {"words": words, "kept": 0, "rows": old_rows, "seconds": round(time.monotonic() - started, 3),
            "prefixes": {"count": len(prefixes), "rows": sum(len(p[2]) for p in prefixes)},
            "recent": {"count": len(recent), "rows": sum(len(p[2]) for p in recent)}}


async def postings_due(reader: Reader, ano: int, *, min_docs: int, grow_share: float) -> str | None:
    """Why a build of the agent's postings is due now ("first", "grown", "stale"), or None."""
    row = await reader.row("SELECT EXISTS (SELECT 1 FROM ss_windows WHERE ano = %(ano)s AND needs_rebuild = 1), "
                           "(SELECT coalesce(sum(idx_rows), 0)::bigint FROM ss_windows WHERE ano = %(ano)s), "
                           "b.mark, b.old_rows FROM (SELECT 1) one LEFT JOIN ss_postings_built b ON b.ano = %(ano)s",
                           {"ano": ano})
    backlog, rows, mark, old_rows = row
    if backlog:
        return None
    if mark is None:
        return "first" if rows >= min_docs else None
    # grown first: the build that catches up after an import runs at normal priority (worker/optimize.py)
    if rows - old_rows >= grow_share * max(old_rows, min_docs):
        return "grown"
    fresh = (await reader.row("SELECT count(*) FROM ss_index WHERE ano = %s AND iseq > %s", (ano, mark)))[0]
    if rows - fresh != old_rows or fresh >= PREFIX_FRESH_LIMIT // 2:
        return "stale"
    return None
