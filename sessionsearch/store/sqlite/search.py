"""What a store's searches read: the ranking of one query over the agent (search_top, also on
the calling thread: search_top_direct), its sessions, and its score bounds (bounds.py); the
reader connections they run on (_Reader) and the mapping those readers fit (_fit_mapping)."""

from __future__ import annotations

import copy
import json
import math
import time
from functools import partial
from typing import Any, cast

import aiosqlite

from ..base import MORE, Match, RowHit, ScoreBound, SessionTop, SessionTops, TopHits
from .bounds import BoundQuery, Known, known_of, word_docs
from .fetch import fetch_all
from .fts import fts5_match
from .newest import QUIET_S, Stamp
from .postings import hot_top
from .prefixes import PrefixTop, is_prefix_query
from .ranking import TS_JOIN, materialized, ranked_shown
from .recent import RecentScores, ShownIndex, phrases
from .scope import id_bounds, range_conditions, scope_arms, scope_conditions
from .search_many import DirectConnection, drive_direct
from .sessions import search_sessions

# A reader maps the database into memory only after this many searches in a row found it unchanged
# since its previous one, and stops at the first change: mapped reads skip copying pages into
# SQLite's cache, but a mapping that follows a growing file slows searches
# (docs/architecture/decisions.md, "Figures behind the store's constants").
QUIET_SEARCHES = 3



class _Reader:
    """A reader connection whose statements are interrupted once `deadline` (monotonic s) passes."""

    def __init__(self, conn: aiosqlite.Connection, mmap_bytes: int) -> None:
        self.conn = conn
        self.deadline = math.inf
        self.data_version: int | None = None  # PRAGMA data_version at its last search
        self.quiet = 0  # searches in a row that found the database unchanged
        self.mmap_bytes = mmap_bytes  # as set on the connection

    def expired(self) -> int:
        return 1 if time.monotonic() > self.deadline else 0


class TopReads:
    """The searches of SqliteAgentStore (store.py), over what it keeps between them."""

    _dirty_seen: tuple[int | None, frozenset[int]]  # (dirty_version, windows) as the last search saw them
    _hot_seen: tuple[int | None, frozenset[str]]  # (hot_version, usable words with postings)
    _recent_scores: RecentScores
    _prefix_top: PrefixTop
    _known: Known | None  # what bound statements read while the files kept a stamp
    _mmap_bytes: int
    _quiet_mmap_bytes: int

    _TS_JOIN = TS_JOIN

    # What a search reads beside its hits, as one row: the meta version, the dirty windows (their
    # list only when its version moved past :seen), the usable words with postings (likewise past
    # :hot_seen), and PRAGMA data_version (whether anything was committed since this reader's last
    # search). Seven columns, the first NULL.
    _HEAD_SQL = (
        "SELECT NULL, (SELECT value FROM meta WHERE key = 'meta_version'), "
        "(SELECT value FROM meta WHERE key = 'dirty_version'), "
        "CASE WHEN (SELECT value FROM meta WHERE key = 'dirty_version') IS :seen THEN NULL "
        "ELSE (SELECT json_group_array(wid) FROM windows WHERE needs_rebuild = 1) END, "
        "(SELECT value FROM meta WHERE key = 'hot_version'), "
        "CASE WHEN (SELECT value FROM meta WHERE key = 'hot_version') IS :hot_seen THEN NULL "
        "ELSE (SELECT json_group_array(word) FROM hot_words WHERE log_seq >= 0) END, "
        "(SELECT data_version FROM pragma_data_version)")

    async def search_top(self, reader: _Reader, match: Match, *, k: int, order: str,
                         include: list[int] | None, exclude: list[int] | None,
                         role: str | None, hot: str | None = None, since: int | None = None,
                         until: int | None = None, ties: bool = True) -> TopHits | None:
        """The meta version, the dirty windows and at least the top `k` hits, exactly ordered.

        Windows needing reconciliation never match. For
        "relevance" the rows returned hold the exact top `k` by bm25, then newest, then message id;
        for "recent" by newest, then message id (more rows may come back; the caller sorts and cuts).

        The ranking is one statement: the plain FTS5 scan with a bounded sorter that bare FTS5
        would run, as a subquery whose rows fetch what the hits show, then the head row
        (_HEAD_SQL): the meta version and the dirty windows, all in one snapshot and one round trip.
        Ranks from postings and ties running through the sorter's margin fetch the shown rows and
        the head in a second statement; `recent` reads the bm25 of its shown rows in another. While
        this store last saw no window needing reconciliation the ranking does not look for any,
        and the head confirms it.

        `hot` is the FTS5 token of a one-word query: when the word has postings (postings.py) a
        relevance search over the whole agent (`include` None) ranks from them instead of scoring
        every row that holds the word. A one-word prefix search of 1-8 letters over the whole agent
        ranks from the prefixes' postings the same way (prefixes.py).

        `since` (inclusive) and `until` (exclusive), epoch ms, keep the rows whose timestamp is in
        range, inside the ranking: `k` counts only those, and a short range is an id span FTS5
        skips to (scope.id_bounds). Scores stay those of the whole agent.
        """
        if match.any and len(match.words) > match.any:  # the rarest of its words, by the kept bounds
            match = match.cut(await word_docs(reader.conn, match))
        expr = fts5_match(match)
        seen_version, seen_dirty = self._dirty_seen
        filtered = seen_version is None or bool(seen_dirty)
        params: dict[str, Any] = {"match": expr}
        ranged = since is not None or until is not None
        # read a statement before the ranking: a message stored in between is left out, as if this
        # search had come just before it
        bounds = await id_bounds(reader.conn, since, until) if ranged else None
        in_range = range_conditions(since, until, bounds, params, "t.ts")
        arms = [(source, where + in_range)  # ranked by a sorter each
                for source, where in scope_arms(include, exclude, role, params, dirty=filtered)]
        shown: dict[int, Any] = {}
        head: Any = None
        top = (None if order == "recent" or include is not None or ranged else
               await self._postings_top(reader, match, expr, hot, k, arms[0][1], params))
        # `recent` scores the rows it shows from what its ranking statement reads of them
        # (recent.py, RecentScores: the words' document counts kept per index state); a query of
        # other words over a short range scores the few rows in it as it sorts them instead, sparing
        # the statement below, whose cost is a walk of the word's whole doclist (FTS5's bm25() counts
        # the documents on each statement)
        scores: dict[int, float] | None = (
            {} if order == "recent" and bounds is not None and phrases(match) is None else None)
        index = ShownIndex() if order == "recent" and scores is None else None
        if top is None:
            top, shown, head = await ranked_shown(reader.conn, self._HEAD_SQL,
                                                  {"seen": seen_version, "hot_seen": self._hot_seen[0]},
                                                  k, order, arms, params, ranged, scores, index)
        if top is None and not ties:  # `ties` False: no ranking of every match (sessions.py has its own)
            return None
        if top is None:  # a tie through the sorter's whole margin: every match in scope, both id ranges
            where = scope_conditions(include, exclude, role, params, dirty=filtered)
            where += range_conditions(since, until, bounds, params, "msg_fts.ts")
            top = await materialized(reader.conn, expr, k, order, where, params)
            index = None  # it read other rows than these
        if head is None:
            head, shown = await self._head_and_shown(reader, top, seen_version)
        if head[5] is not None:  # the usable words changed: the next search knows them
            self._hot_seen = (head[4], frozenset(json.loads(head[5])))
        dirty_version, dirty_json = head[2], head[3]
        if dirty_json is not None:  # the list changed since this store last read it
            seen_dirty = frozenset(json.loads(dirty_json))
            self._dirty_seen = (dirty_version, seen_dirty)
            if not filtered and seen_dirty:  # a window turned dirty meanwhile: rank again, excluding it
                return await self.search_top(reader, match, k=k, order=order, include=include, exclude=exclude,
                                             role=role, hot=hot, since=since, until=until, ties=ties)
        await self._fit_mapping(reader, head[6])  # after the retry above, which fits it itself
        ranks = await self._ranks(reader, match, expr, order, top, shown, scores, index)
        # a row id of 0 is a sentinel (no window has id 0): it says more matched than the top k; an
        # index row whose transcript row is gone (an orphan awaiting the sweep) is no hit
        hits = [RowHit(rid, ranks.get(rid, 0.0), *shown[rid][1:]) if rid else MORE
                for rid, _ in top if rid in shown or not rid]
        return TopHits(head[1], seen_dirty, hits)

    async def _head_and_shown(self, reader: _Reader, top: list[Any], seen_version: Any
                              ) -> tuple[Any, dict[int, Any]]:
        """The head row (_HEAD_SQL) and the rows the hits show, in one statement (for a ranking
        that did not read them itself)."""
        ids = json.dumps([r[0] for r in top if r[0]])
        rows = await fetch_all(reader.conn,
            f"{self._HEAD_SQL} UNION ALL SELECT e.id, e.event_id, e.ts, e.text, NULL, NULL, NULL "
            "FROM json_each(:ids) j JOIN events e ON e.id = j.value",
            {"ids": ids, "seen": seen_version, "hot_seen": self._hot_seen[0]})
        return rows[0], {r[0]: r[:4] for r in rows[1:]}

    async def _postings_top(self, reader: _Reader, match: Match, expr: str | None, hot: str | None, k: int,
                            where: list[str], params: dict[str, Any]) -> list[Any] | None:
        """The ranking by relevance over the whole agent (less the excluded windows, `where`) from
        the postings of its common word (`hot`, postings.py) or of its 1-8 letter prefix
        (prefixes.py), None when neither answers. Postings only over the whole agent at any time:
        they are merged in the agent's score order, and a narrow scope would pass over most of
        what they hold."""
        top: list[Any] | None = None
        if hot is not None and hot in self._hot_seen[1]:
            await reader.conn.execute("SAVEPOINT hot")  # one snapshot for postings, log and FTS5 (or the caller's)
            try:
                top = await hot_top(reader.conn, hot, expr, k, where, params)  # one arm: no include
            finally:
                if reader.conn.in_transaction:
                    await reader.conn.execute("RELEASE hot")
        if (top is None and not where and match.prefix and len(match.words) == 1
                and is_prefix_query(match.words[0])):
            await reader.conn.execute("SAVEPOINT prefix")  # one snapshot for postings, log and rows
            try:
                top = await self._prefix_top.top(reader.conn, match.words[0].lower(), k)
            finally:
                if reader.conn.in_transaction:
                    await reader.conn.execute("RELEASE prefix")
        return top

    async def _ranks(self, reader: _Reader, match: Match, expr: str | None, order: str, top: list[Any],
                     shown: dict[int, Any], scores: dict[int, float] | None,
                     index: ShownIndex | None) -> dict[int, float]:
        """The bm25 of the ranked rows: as ranked, or (`recent`, which ranks by time) as scored
        beside the ranking, from the words' kept counts, or read for the shown rows."""
        ranks: dict[int, float] = {r[0]: r[1] for r in top}
        if scores and all(rid in scores for rid, _ in top if rid):
            ranks = scores
        elif order == "recent" and top and index is not None and (fast := await self._recent_scores.scores(
                reader.conn, match, [(rid, shown[rid][3]) for rid, _ in top if rid in shown], index)) is not None:
            ranks = fast
        elif order == "recent" and top:
            # bm25 of the shown rows only: a walk of the doclist that reads no row, bm25 evaluated
            # where the id is listed. `+rowid` keeps the list from being handed to FTS5 as rowid
            # lookups, each of which would recount the phrase's documents.
            ranks = dict(await fetch_all(reader.conn,
                "SELECT rowid, bm25(msg_fts) FROM msg_fts WHERE msg_fts MATCH :match "
                "AND +rowid IN (SELECT value FROM json_each(:ids))",
                {"match": expr, "ids": json.dumps([rid for rid, _ in top if rid])}))
        return ranks

    def search_top_direct(self, reader: _Reader, match: Match, **args: Any) -> TopHits | None:
        """search_top run on the calling thread over the borrowed `reader`'s own connection (its
        thread idle meanwhile): the same statements, no hop per statement (search_tops)."""
        direct = copy.copy(reader)
        direct.conn = cast(aiosqlite.Connection, DirectConnection(reader.conn._conn))
        try:
            return drive_direct(self.search_top(direct, match, **args))
        finally:  # what _fit_mapping learnt belongs to the reader
            reader.quiet, reader.data_version, reader.mmap_bytes = direct.quiet, direct.data_version, direct.mmap_bytes

    def known_bound(self, query: BoundQuery, stamp: Stamp | None) -> ScoreBound | None:
        """The agent's ScoreBound for `query` from what bound statements read while its files kept
        `stamp` (bounds.Known), or None: to be read (score_bound_direct)."""
        known = self._known
        if known is None or stamp is None or known.stamp != stamp or (bound := known.bound(query)) is None:
            return None
        return ScoreBound(known.version, known.dirty, bound)

    def score_bound_direct(self, reader: _Reader, query: BoundQuery, stamp: Stamp | None,
                           stamped_at: float) -> ScoreBound:
        """The agent's ScoreBound for `query` (bounds.py), its meta version and dirty windows read
        in the same statement (_HEAD_SQL), on the calling thread over the reader's own connection;
        what it read is kept for `stamp`, taken at `stamped_at` (time.time) before the read, when
        the files were quiet then (newest.py's rule)."""
        conn = reader.conn._conn  # borrowed for a hop of many agents (search_many.py)
        rows = conn.execute(f"{query.sql} UNION ALL {self._HEAD_SQL}",
                            {**query.params, "seen": self._dirty_seen[0], "hot_seen": self._hot_seen[0]}).fetchall()
        head = rows[-1]
        if head[5] is not None:
            self._hot_seen = (head[4], frozenset(json.loads(head[5])))
        if head[3] is not None:
            self._dirty_seen = (head[2], frozenset(json.loads(head[3])))
        read = known_of(query, stamp, rows[:-1], head[1], self._dirty_seen[1])
        if self._known is not None and stamp is not None and self._known.stamp == stamp:
            self._known.add(query, rows[:-1])
        else:
            quiet = stamp is not None and max(stamp[2], stamp[5]) < (stamped_at - QUIET_S) * 1e9
            self._known = read if quiet else None
        bound = read.bound(query)
        assert bound is not None  # every term of the query was just read
        return ScoreBound(read.version, read.dirty, bound)

    async def search_sessions(self, reader: _Reader, match: Match, *, k: int,
                              order: str, include: list[int] | None, exclude: list[int] | None, role: str | None,
                              since: int | None = None, until: int | None = None, hot: str | None = None
                              ) -> SessionTops:
        """resultMode "sessions" (sessions.py) from messages mode's top hits when they suffice."""
        scope: dict[str, Any] = dict(order=order, include=include, exclude=exclude, role=role, since=since,
                                     until=until)
        top = partial(self.search_top, reader, match, hot=hot, ties=False, **scope)  # given k=
        version, dirty, found = await search_sessions(reader.conn, self._HEAD_SQL, self._TS_JOIN, top,
                                                      fts5_match(match), k=k, **scope)
        return SessionTops(version, dirty, [SessionTop(key, n, RowHit(*best)) for key, n, best in found])

    async def _fit_mapping(self, reader: _Reader, data_version: int) -> None:
        """Map the database into the reader while it stays unchanged; stop at a change."""
        reader.quiet = reader.quiet + 1 if data_version == reader.data_version else 0
        reader.data_version = data_version
        want = self._quiet_mmap_bytes if reader.quiet >= QUIET_SEARCHES else self._mmap_bytes
        if want != reader.mmap_bytes:
            await reader.conn.execute(f"PRAGMA mmap_size = {int(want)}")
            reader.mmap_bytes = want
