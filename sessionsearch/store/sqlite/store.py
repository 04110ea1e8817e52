"""The SQLite backend: one database per agent, one writer thread, a pool of reader connections.

Writes run whole on the writer's thread (see writer.py), one job per transaction.
Searches and history reads run on aiosqlite reader connections (WAL lets them proceed while the
writer commits), each with a progress handler that interrupts a statement past its deadline.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import sqlite3
import time
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite

from ...errors import SearchTimeout, StorageFull, Unavailable
from ...indexer.events import Event
from ..base import (
    MORE,
    AppendResult,
    BranchRow,
    EmbeddingChanges,
    Match,
    MeaningHead,
    MessageRow,
    MetaSnapshot,
    Newest,
    ReconcileTx,
    RowHit,
    ScoreBound,
    SessionMeta,
    SessionTop,
    SessionTops,
    TopHits,
    WindowMeta,
    WindowRef,
)
from ..rowids import row_id, seq_sql, window_ranges
from . import meaning, reconcile
from .bounds import BoundQuery, Folded, Known, known_of, read_bounds, store_bounds
from .fts import fts5_match
from .many import DirectConnection, OpenBudget, drive_direct
from .newest import NEWEST_SQL, QUIET_S, NewestKept, Stamp
from .postings import MAX_WORDS, MIN_DOCS, MIN_SHARE, batches, common_words, hot_top, read_postings
from .postings_build import BUILT_ROWS_KEY, built_rows, postings_due, prefix_upkeep_at, words_to_build
from .prefixes import PrefixTop, is_prefix_query, read_fold, read_prefixes
from .ranking import TS_JOIN, materialized, ranked_shown
from .recent import RecentScores, ShownIndex, phrases
from .scope import id_bounds, range_conditions, scope_arms, scope_conditions
from .sessions import search_sessions
from .writer import SqliteWriter, create_database, is_full, unwritable

T = TypeVar("T")
# The deadline is checked every this many VM steps: often enough to stop within a millisecond or
# so, rarely enough that the Python callback costs nothing measurable.
PROGRESS_OPS = 200_000
# A reader maps the database into memory only after this many searches in a row found it unchanged
# since its previous one, and stops at the first change: mapped reads skip copying pages into
# SQLite's cache, but a mapping that follows a growing file slows searches
# (docs/architecture/decisions.md, "Figures behind the store's constants").
QUIET_SEARCHES = 3


async def _fetch(conn: aiosqlite.Connection, sql: str, params: Any = None) -> list[Any]:
    """A statement's rows (aiosqlite types them as an Iterable; they are a list)."""
    return cast(list[Any], await conn.execute_fetchall(sql, params))


def _store_hot_word(writer: SqliteWriter, *, word: str, log_seq: int, postings: array) -> None:
    writer.hot.store_hot_word(word, log_seq, postings)


def _store_bounds(writer: SqliteWriter, folded: Folded) -> bool:
    with writer.tx() as c:
        return store_bounds(c, folded)


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


class SqliteAgentStore:
    """The transcripts, index and index state of one agent, in `<data_dir>/agents/<agentId>.db`."""

    writes_await_server = False  # the writer thread's

    def __init__(self, path: Path, agent_id: str, *, readers: int = 4, cold_dir: Path | None = None,
                 busy_timeout_ms: int = 30_000, mmap_bytes: int = 0, quiet_mmap_bytes: int = 0,
                 rows_in_sql: bool = False, budget: OpenBudget | None = None) -> None:
        """`budget`: the process's bound on stores holding open files (released stores reopen
        their connections on next use)."""
        self.path = Path(path)
        self.agent_id = agent_id
        self.cold_dir = Path(cold_dir) if cold_dir else self.path.parent / "cold" / agent_id
        self._max_readers = max(1, readers)
        self._busy_timeout_ms = busy_timeout_ms
        self._mmap_bytes = max(0, mmap_bytes)
        self._quiet_mmap_bytes = max(self._mmap_bytes, quiet_mmap_bytes)
        self._rows_in_sql = rows_in_sql
        self._executor: ThreadPoolExecutor | None = None
        self._writer: SqliteWriter | None = None
        self._readers: asyncio.Queue[_Reader] = asyncio.Queue()
        self._all_readers: list[_Reader] = []
        self._dirty_seen: tuple[int | None, frozenset[int]] = (None, frozenset())  # (dirty_version, windows)
        # (hot_version, usable words with postings) as the last search saw them
        self._hot_seen: tuple[int | None, frozenset[str]] = (None, frozenset())
        self._recent_scores = RecentScores()
        self._prefix_top = PrefixTop()
        self._newest = NewestKept(self.path)
        self._known: Known | None = None  # what bound statements read while the files kept a stamp
        self._budget = budget
        self._busy = 0  # readers borrowed or being opened, writes running
        self._closed = False
        self._starting = asyncio.Lock()  # one writer start at a time

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._busy > 0

    async def open(self) -> SqliteAgentStore:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._busy += 1
        try:
            if self._budget is not None:
                await self._budget.admit(self)
            await self._start_writer()
        finally:
            self._busy -= 1
        return self

    async def _start_writer(self) -> None:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sessionsearch-writer-{self.agent_id}")
        run, timeout_ms = partial(asyncio.get_running_loop().run_in_executor, executor), self._busy_timeout_ms
        try:
            if not self.path.exists():
                await run(partial(create_database, self.path, self.cold_dir, busy_timeout_ms=timeout_ms))
            self._writer = await run(partial(SqliteWriter, self.path, self.cold_dir, busy_timeout_ms=timeout_ms,
                                             rows_in_sql=self._rows_in_sql))
        except (sqlite3.Error, OSError) as exc:  # OSError: the turnstile file could not be opened
            executor.shutdown(wait=True)
            if is_full(exc):
                raise StorageFull(self.agent_id) from exc
            raise Unavailable(f"cannot open {self.path}: {exc}") from exc
        self._executor = executor

    async def close(self) -> None:
        self._closed = True
        if self._budget is not None:
            self._budget.forget(self)
        await self.release()

    async def release(self) -> None:
        """Close the connections and threads (the store stays usable: its next use opens them
        again). Taken from the store before the first await, so a use meanwhile opens new ones."""
        readers, self._all_readers, self._readers = self._all_readers, [], asyncio.Queue()
        executor, writer, self._executor, self._writer = self._executor, self._writer, None, None
        for reader in readers:
            await reader.conn.close()
        if executor is not None:
            if writer is not None:
                await asyncio.get_running_loop().run_in_executor(executor, writer.close)
            executor.shutdown(wait=True)

    async def _run(self, job: Callable[[SqliteWriter], T]) -> T:
        """Run one writer job (a whole transaction) on the writer thread, given the writer."""
        if self._closed:
            raise Unavailable(f"agent store {self.agent_id} is closed")
        self._busy += 1
        try:
            if self._budget is not None:
                await self._budget.admit(self)
            async with self._starting:
                if self._executor is None or self._writer is None:  # released: open it again
                    await self._start_writer()
            executor, writer = self._executor, self._writer
            assert executor is not None and writer is not None
            return await asyncio.get_running_loop().run_in_executor(executor, job, writer)
        except (sqlite3.Error, OSError) as exc:
            if is_full(exc):
                raise unwritable(self.agent_id, exc) from exc
            raise
        finally:
            self._busy -= 1

    @asynccontextmanager
    async def reader(self, deadline: float = math.inf) -> AsyncIterator[_Reader]:
        """Borrow a reader connection; waiting for one counts against `deadline` (monotonic s)."""
        self._busy += 1
        try:
            if self._budget is not None:
                await self._budget.admit(self)
            async with self._borrow(deadline) as reader:
                yield reader
        finally:
            self._busy -= 1

    @asynccontextmanager
    async def _borrow(self, deadline: float) -> AsyncIterator[_Reader]:
        if self._readers.empty() and len(self._all_readers) < self._max_readers:
            # not bound to its thread: search_tops runs it on another while it is borrowed
            conn = await aiosqlite.connect(self.path, isolation_level=None, check_same_thread=False)
            await conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            await conn.execute("PRAGMA query_only = 1")
            # Off by default: mapped all the time, searches got slower while appends or
            # reconciliation ran, the mapping following the growing file. A quiet reader maps it
            # (_fit_mapping).
            await conn.execute(f"PRAGMA mmap_size = {self._mmap_bytes}")
            reader = _Reader(conn, self._mmap_bytes)
            await conn.set_progress_handler(reader.expired, PROGRESS_OPS)
            self._all_readers.append(reader)
            self._readers.put_nowait(reader)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SearchTimeout()
        if not self._readers.empty():
            reader = self._readers.get_nowait()
        else:
            try:
                reader = await asyncio.wait_for(self._readers.get(), None if math.isinf(remaining) else remaining)
            except TimeoutError:
                raise SearchTimeout() from None
        reader.deadline = deadline
        try:
            yield reader
        except sqlite3.OperationalError as exc:
            if "interrupted" in str(exc):
                raise SearchTimeout() from None
            raise
        finally:
            reader.deadline = math.inf
            if reader in self._all_readers:  # not released meanwhile (only when the budget is past)
                self._readers.put_nowait(reader)
            else:
                await reader.conn.close()

    # -- writes: each one transaction on the writer thread ----------------------------------

    async def applied_migrations(self) -> list[tuple[int, str]]:
        return await self._run(lambda w: w.applied_migrations())

    async def upsert_session(self, key: str, fields: dict[str, Any]) -> bool:
        """Create or update a session's metadata; returns True when the session is new."""
        return await self._run(lambda w: w.upsert_session(key, fields))

    async def append(self, key: str, events: list[Event], *, session_id: str | None = None,
                     index: bool = True, source_lines: int | None = None) -> AppendResult:
        """Store a batch of validated events in one transaction.

        A batch that only extends the active branch has its user/assistant text indexed in the same
        transaction (when `index`); anything else, or `index=False` (bulk import), marks the window
        for reconciliation. `source_lines` records how far an import file has been consumed.
        """
        return await self._run(lambda w: w.append(key, events, session_id, index, source_lines))

    async def rotate(self, key: str, session_id: str | None) -> tuple[str, str | None]:
        return await self._run(lambda w: w.rotate(key, session_id))

    async def delete_session(self, key: str) -> bool:
        return (await self._run(lambda w: w.delete_session(key)))[0]

    async def archive(self, key: str) -> int:
        return await self._run(lambda w: w.archive(key))

    async def restore(self, key: str) -> list[int]:
        return await self._run(lambda w: w.restore(key))

    async def all_source_lines(self) -> dict[str, int]:
        """Lines of each window's import file consumed so far, by session id."""
        return await self._run(lambda w: w.all_source_lines())

    async def import_many(self, items: list[tuple]) -> list:
        """Small import steps (key, fields, events, session_id, lines) in one transaction; a step
        that failed holds its error: a refusal of its data, or Unavailable (StorageFull) when the
        database could not be written at all (a full disk, a lock held too long, I/O)."""
        results = await self._run(lambda w: w.import_many(items))
        return [unwritable(self.agent_id, r) if isinstance(r, (sqlite3.Error, OSError)) else r for r in results]

    async def reconcile_tx(self, step: Callable[[ReconcileTx], Awaitable[T]]) -> T:
        """Run a reconciliation step (indexer/reconcile.py) as one transaction on the writer thread."""
        return await self._run(partial(reconcile.run_step, step=step))

    async def sweep_orphans(self) -> int:
        return await self._run(reconcile.sweep_orphans)

    async def optimize(self, *, min_docs: int | None = None, min_share: float = MIN_SHARE,
                       max_words: int = MAX_WORDS, incremental: bool = False) -> dict[str, Any]:
        """Build postings for the words common enough (postings.py) and drop those of words no longer
        among them; `incremental`: only the words without usable postings or about to lose them
        (postings_build.py), the others kept; then the common prefixes' postings (prefixes.py), in an
        incremental build only when they need it: built when none are or they were given up, else
        the index's changes since folded in (`prefixes.folded`: the rows touched). Reads run on a
        connection of their own, on a thread. `min_docs` None: MIN_DOCS."""
        min_docs = MIN_DOCS if min_docs is None else min_docs
        rows = await asyncio.to_thread(built_rows, self.path)
        words = await asyncio.to_thread(common_words, self.path, min_docs=min_docs, min_share=min_share,
                                        max_words=max_words)
        # the prefixes first: one walk of the index, where the words read every row of each word
        # (after a fresh ingest, minutes of them); prefix searches have nothing else to go fast with.
        # Again after each group of words when rows indexed meanwhile (an ingest still running)
        # left them past what a search takes in
        prefix_build = await self._prefix_upkeep("first" if not incremental else None)
        dropped = await self._run(lambda w: w.hot.drop_hot_words({w for w, _ in words}))
        todo = await asyncio.to_thread(words_to_build, self.path, words) if incremental else words
        if todo:
            await self._run(lambda w: w.hot.start_index_log())
        built = {}
        for batch in batches(todo):
            started = time.monotonic()
            log_seq, read = await asyncio.to_thread(read_postings, self.path, batch)
            per_row = (time.monotonic() - started) / max(1, sum(len(p) for p in read))  # of the read
            for word, postings in zip(batch, read):
                started = time.monotonic()
                await self._run(partial(_store_hot_word, word=word, log_seq=log_seq, postings=postings))
                built[word] = {"rows": len(postings) // 3,
                               "seconds": round(per_row * len(postings) + time.monotonic() - started, 3)}
            if await asyncio.to_thread(prefix_upkeep_at, self.path) == "stale":
                prefix_build = await self._prefix_upkeep("stale") or prefix_build
        await self.execute_write("INSERT OR REPLACE INTO meta VALUES (?, ?)", (BUILT_ROWS_KEY, rows))
        return {"words": built, "dropped": dropped, "kept": len(words) - len(todo), "prefixes": prefix_build,
                "bounds": await self.fold_bounds()}

    async def fold_bounds(self) -> dict[str, Any]:
        """The terms' bounds (bounds.py) read on a connection of their own, then kept in one short
        write transaction if the index has not moved on meanwhile ({} then, past MAX_ROWS, or when
        the bounds kept are of the index as it is)."""
        started = time.monotonic()
        folded = await asyncio.to_thread(read_bounds, self.path)
        if folded is None or not await self._run(lambda w: _store_bounds(w, folded)):
            return {}
        return {"terms": len(folded.terms), "seconds": round(time.monotonic() - started, 3)}

    async def _prefix_upkeep(self, upkeep: str | None) -> dict[str, Any] | None:
        """The prefixes' postings built (`upkeep` "first" or "stale"), or what they need done
        (None: asked, postings_build.prefix_upkeep): built, or the changes folded in; what was done."""
        started = time.monotonic()
        if upkeep is None:
            upkeep = await asyncio.to_thread(prefix_upkeep_at, self.path)
        if upkeep == "fold":
            fold = await asyncio.to_thread(read_fold, self.path)
            if fold is not None and await self._run(lambda w: w.prefixes.fold_prefixes(fold)):
                return {"folded": fold.touched, "count": len(fold.heads),
                        "rows": sum(len(kept) for kept in fold.kept.values()),
                        "seconds": round(time.monotonic() - started, 3)}
            upkeep = "stale"  # not foldable (a change not logged, or the postings moved on): build them
        if upkeep not in ("first", "stale"):
            return None
        await self._run(lambda w: w.hot.start_index_log())
        log_seq, gone_seq, n_rows, prefixes = await asyncio.to_thread(read_prefixes, self.path)
        await self._run(lambda w: w.prefixes.store_prefixes(log_seq, gone_seq, n_rows, prefixes))
        return {"count": len(prefixes), "rows": sum(len(p[2]) for p in prefixes.values()),
                "seconds": round(time.monotonic() - started, 3)}

    async def postings_due(self, *, min_docs: int | None, grow_share: float) -> str | None:
        """Why building postings would pay off now, or None (postings_build.py)."""
        return await asyncio.to_thread(postings_due, self.path, min_docs=MIN_DOCS if min_docs is None else min_docs,
                                       grow_share=grow_share)

    async def dirty_windows(self) -> list[int]:
        return await self._run(reconcile.dirty_windows)

    async def execute_write(self, sql: str, params: tuple = ()) -> None:
        """Run one statement in its own write transaction (tests and maintenance)."""
        def job(writer: SqliteWriter) -> None:
            with writer.tx() as c:
                c.execute(sql, params)
        await self._run(job)

    # -- reads -------------------------------------------------------------------------------

    async def ping(self, reader: _Reader) -> None:
        await _fetch(reader.conn, "SELECT 1 FROM windows LIMIT 1")

    async def newest(self, deadline: float = math.inf) -> Newest:
        """The agent's Newest (store/base.py), from memory while its files are unchanged (newest.py)."""
        at = time.time()
        stamp, kept = self._newest.stamp()
        if kept is not None:
            return kept
        async with self.reader(deadline) as reader:
            rows = await _fetch(reader.conn, NEWEST_SQL)
        return self._newest.read(stamp, at, rows[0])

    async def meta_version(self, reader: _Reader) -> int:
        return (await _fetch(reader.conn, "SELECT value FROM meta WHERE key = 'meta_version'"))[0][0]

    # a session's latest activity: its metadata or its current window's last append
    _ACTIVITY = ("max(s.updated_at, coalesce(w.updated_at, 0)) "
                 "FROM sessions s LEFT JOIN windows w ON w.wid = s.current_wid")
    _SESSION_COLUMNS = ("SELECT s.session_key, w.session_id, s.label, s.display_name, s.spawned_by, "
                        f"s.parent_session_key, s.kind, s.grp, s.incognito, s.archived_at, {_ACTIVITY}")

    async def meta_snapshot(self, reader: _Reader, since: int | None = None) -> MetaSnapshot:
        """What search scoping needs: the meta version, whether this is the whole catalog, then the
        sessions and windows, and the session keys and window ids deleted. `since` (a meta version
        read earlier): only what changed after it, unless the tombstones of deletions after it were
        pruned meanwhile (then everything, as with no `since`).

        The version is read first, so rows may be newer than it but never older: applying them
        again on the next call is harmless. The horizon is read last, so a prune that ran while the
        changes were read is seen.
        """
        conn = reader.conn
        version = await self.meta_version(reader)
        if since is not None:
            sessions = await _fetch(conn, f"{self._SESSION_COLUMNS} WHERE s.meta_seq > ?", (since,))
            windows = await _fetch(conn,
                "SELECT wid, session_key, session_id, cold FROM windows WHERE meta_seq > ?", (since,))
            gone = await _fetch(conn, "SELECT kind, name FROM catalog_deleted WHERE meta_seq > ?", (since,))
            (horizon,), = await _fetch(conn, "SELECT value FROM meta WHERE key = 'deleted_from'")
            if since >= horizon:
                return MetaSnapshot(version, False, [SessionMeta(*r) for r in sessions],
                                    [WindowMeta(*r) for r in windows],
                                    [name for kind, name in gone if kind == "session"],
                                    [int(name) for kind, name in gone if kind == "window"])
        sessions = await _fetch(conn, self._SESSION_COLUMNS)
        windows = await _fetch(conn, "SELECT wid, session_key, session_id, cold FROM windows")
        return MetaSnapshot(version, True, [SessionMeta(*r) for r in sessions], [WindowMeta(*r) for r in windows],
                            [], [])

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
        every row that holds the word. A one-word prefix search of 2-4 letters over the whole agent
        ranks from the prefixes' postings the same way (prefixes.py).

        `since` (inclusive) and `until` (exclusive), epoch ms, keep the rows whose timestamp is in
        range, inside the ranking: `k` counts only those, and a short range is an id span FTS5
        skips to (scope.id_bounds). Scores stay those of the whole agent.
        """
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
        top: list[Any] | None = None
        shown: dict[int, Any] = {}
        head: Any = None
        # from postings only over the whole agent (less excluded windows) at any time: they are
        # merged in the agent's score order, and a narrow scope would pass over most of what they hold
        if (hot is not None and order != "recent" and include is None and not ranged
                and hot in self._hot_seen[1]):
            await reader.conn.execute("SAVEPOINT hot")  # one snapshot for postings, log and FTS5 (or the caller's)
            try:
                top = await hot_top(reader.conn, hot, expr, k, arms[0][1], params)  # one arm: no include
            finally:
                if reader.conn.in_transaction:
                    await reader.conn.execute("RELEASE hot")
        # `recent` scores the rows it shows from what its ranking statement reads of them
        # (recent.py, RecentScores: the words' document counts kept per index state); a query of
        # other words over a short range scores the few rows in it as it sorts them instead, sparing
        # the statement below, whose cost is a walk of the word's whole doclist (FTS5's bm25() counts
        # the documents on each statement)
        scores: dict[int, float] | None = (
            {} if order == "recent" and bounds is not None and phrases(match) is None else None)
        if (top is None and order != "recent" and include is None and not ranged and not arms[0][1]
                and match.prefix and len(match.words) == 1 and is_prefix_query(match.words[0])):
            await reader.conn.execute("SAVEPOINT prefix")  # one snapshot for postings, log and rows
            try:
                top = await self._prefix_top.top(reader.conn, match.words[0].lower(), k)
            finally:
                if reader.conn.in_transaction:
                    await reader.conn.execute("RELEASE prefix")
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
            ids = json.dumps([r[0] for r in top if r[0]])
            rows = await _fetch(reader.conn,
                f"{self._HEAD_SQL} UNION ALL SELECT e.id, e.event_id, e.ts, e.text, NULL, NULL, NULL "
                "FROM json_each(:ids) j JOIN events e ON e.id = j.value",
                {"ids": ids, "seen": seen_version, "hot_seen": self._hot_seen[0]})
            head, shown = rows[0], {r[0]: r[:4] for r in rows[1:]}
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
        ranks = {r[0]: r[1] for r in top}
        if scores and all(rid in scores for rid, _ in top if rid):
            ranks = scores
        elif order == "recent" and top and index is not None and (fast := await self._recent_scores.scores(
                reader.conn, match, [(rid, shown[rid][3]) for rid, _ in top if rid in shown], index)) is not None:
            ranks = fast
        elif order == "recent" and top:
            # bm25 of the shown rows only: a walk of the doclist that reads no row, bm25 evaluated
            # where the id is listed. `+rowid` keeps the list from being handed to FTS5 as rowid
            # lookups, each of which would recount the phrase's documents.
            ranks = dict(await _fetch(reader.conn,
                "SELECT rowid, bm25(msg_fts) FROM msg_fts WHERE msg_fts MATCH :match "
                "AND +rowid IN (SELECT value FROM json_each(:ids))",
                {"match": expr, "ids": json.dumps([rid for rid, _ in top if rid])}))
        # a row id of 0 is a sentinel (no window has id 0): it says more matched than the top k; an
        # index row whose transcript row is gone (an orphan awaiting the sweep) is no hit
        hits = [RowHit(rid, ranks.get(rid, 0.0), *shown[rid][1:]) if rid else MORE
                for rid, _ in top if rid in shown or not rid]
        return TopHits(head[1], seen_dirty, hits)

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
        conn = reader.conn._conn  # borrowed for a hop of many agents (many.py)
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


    async def window_of(self, reader: _Reader, key: str, session_id: str | None) -> WindowRef | None:
        """The key's current window, or `session_id`'s if it is the key's."""
        if session_id is None:
            rows = await _fetch(reader.conn,
                "SELECT w.wid, w.session_id, w.cold FROM sessions s JOIN windows w ON w.wid = s.current_wid "
                "WHERE s.session_key = ?", (key,))
        else:
            rows = await _fetch(reader.conn,
                "SELECT wid, session_id, cold FROM windows WHERE session_key = ? AND session_id = ?",
                (key, session_id))
        return WindowRef(*rows[0]) if rows else None

    async def windows_of(self, reader: _Reader, key: str) -> list[WindowRef]:
        """Every window of a key, current first, then newest first."""
        rows = await _fetch(reader.conn,
            "SELECT w.wid, w.session_id, w.cold FROM windows w LEFT JOIN sessions s ON s.session_key = w.session_key "
            "WHERE w.session_key = ? ORDER BY (w.wid = s.current_wid) DESC, w.wid DESC", (key,))
        return [WindowRef(*r) for r in rows]

    async def branch_rows(self, reader: _Reader, wid: int) -> list[BranchRow]:
        """The active branch's structural rows, in order."""
        rows: list[Any] = []
        for lo, hi in window_ranges(wid):
            rows += await _fetch(reader.conn,
                f"SELECT {seq_sql('id')}, event_id, type, role, "
                "CASE WHEN type = 'reset' THEN json_extract(body, '$.firstKeptEntryId') END "
                "FROM events WHERE id BETWEEN ? AND ? AND on_branch = 1 ORDER BY id", (lo, hi))
        return [BranchRow(*r) for r in rows]

    async def message_rows(self, reader: _Reader, wid: int, seqs: list[int]) -> list[MessageRow]:
        """The given seqs' rows, in seq order."""
        out: list[Any] = []
        for start in range(0, len(seqs), 500):
            chunk = seqs[start:start + 500]
            ids = [row_id(wid, s, role) for s in chunk for role in (None, "assistant")]
            marks = ",".join("?" * len(ids))
            out += await _fetch(reader.conn,
                f"SELECT {seq_sql('id')}, event_id, role, ts, body FROM events WHERE id IN ({marks})", ids)
        return sorted((MessageRow(*r) for r in out), key=lambda r: r.seq)

    async def activity(self, reader: _Reader) -> tuple[int, dict[str, int]]:
        """The meta version, and each session's latest activity (epoch ms), read now: appends do
        not move the meta version, so the catalog's copy lags."""
        rows = await _fetch(reader.conn,
            f"SELECT NULL, value FROM meta WHERE key = 'meta_version' UNION ALL SELECT s.session_key, {self._ACTIVITY}")
        return rows[0][1], dict(rows[1:])

    async def status(self, reader: _Reader) -> dict[str, int]:
        rows = await _fetch(reader.conn,
            "SELECT count(*), sum(needs_rebuild = 0), sum(needs_rebuild), coalesce(sum(messages), 0), "
            "coalesce(sum(CASE WHEN needs_rebuild = 0 THEN messages ELSE 0 END), 0), sum(cold) FROM windows")
        r = rows[0]
        return {"windows": r[0], "indexedWindows": r[1] or 0, "backlog": r[2] or 0, "messages": r[3],
                "indexedMessages": r[4], "coldWindows": r[5] or 0}

    async def meaning_head(self, reader: _Reader, model: str) -> MeaningHead:
        return await meaning.meaning_head(reader.conn, model)

    async def embedding_changes(self, reader: _Reader, model_no: int, embed_seq: int, gone_seq: int
                                ) -> EmbeddingChanges:
        return await meaning.embedding_changes(reader.conn, model_no, embed_seq, gone_seq)

    async def indexed_rows(self, reader: _Reader, rids: list[int]) -> list[RowHit]:
        return await meaning.indexed_rows(reader.conn, rids)

    async def embed_status(self, reader: _Reader, model: str) -> dict[str, int]:
        return await meaning.embed_status(reader.conn, model)

    async def index_rows(self, reader: _Reader, wid: int) -> list[int]:
        """Ids of the index rows of a window (for checks and tests)."""
        rows: list[tuple] = []
        for lo, hi in window_ranges(wid):
            rows += await _fetch(reader.conn,
                "SELECT rowid FROM msg_fts WHERE rowid BETWEEN ? AND ? ORDER BY rowid", (lo, hi))
        return [r[0] for r in rows]

    def rebuilding_beside(self, wid: int) -> bool:
        """Whether this process's writer is rebuilding the window beside another one right now."""
        return self._writer is not None and wid in self._writer.rebuilding

    async def is_clean(self, wid: int) -> bool:
        """Whether the window is indexed and unclaimed as last committed: read without the writer, so a
        job whose window was rebuilt beside another's finishes while the writer is busy."""
        async with self.reader() as reader:
            rows = await _fetch(reader.conn,
                "SELECT 1 FROM windows WHERE wid = ? AND needs_rebuild = 0 AND (claim_token IS NULL "
                "OR claim_expires_at < ?)", (wid, time.time()))
        return bool(rows)
