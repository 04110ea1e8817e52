"""The SQLite backend: one database per agent, one writer thread, a pool of reader connections.

Writes run whole on the writer's thread (see writer.py), one job per transaction.
Searches (search.py, TopReads) and history reads run on aiosqlite reader connections (WAL lets them
proceed while the writer commits), each with a progress handler that interrupts a statement past
its deadline.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from ...errors import SearchTimeout, StorageFull, Unavailable
from ...transcript.events import Event
from ..base import (
    AppendResult,
    BranchRow,
    EmbeddingChanges,
    MeaningHead,
    MessageRow,
    MetaSnapshot,
    Newest,
    ReconcileTx,
    RowHit,
    SessionMeta,
    WindowMeta,
    WindowRef,
)
from ..packed import Packed
from ..rowids import row_id, seq_sql, window_ranges
from . import meaning, reconcile
from .bounds import Folded, Known, read_bounds, store_bounds
from .budget import OpenBudget
from .fetch import fetch_all
from .files import no_files, out_of_files
from .newest import NEWEST_SQL, NewestKept, Stamp
from .postings import MAX_WORDS, MIN_DOCS, MIN_SHARE, batches, common_words, read_postings
from .postings_build import BUILT_ROWS_KEY, built_rows, postings_due, prefix_upkeep_at, words_to_build
from .prefixes import PrefixTop, read_fold, read_prefixes
from .recent import RecentScores
from .search import TopReads, _Reader
from .writer import SqliteWriter, create_database, is_full, unwritable

T = TypeVar("T")
# The deadline is checked every this many VM steps: often enough to stop within a millisecond or
# so, rarely enough that the Python callback costs nothing measurable.
PROGRESS_OPS = 200_000
READER_WAIT_S = 1.0  # a borrower waiting for a reader looks again this often whether it may open one
def _store_hot_word(writer: SqliteWriter, *, word: str, log_seq: int, postings: array[int]) -> None:
    writer.hot.store_hot_word(word, log_seq, postings)


def _store_bounds(writer: SqliteWriter, folded: Folded) -> bool:
    with writer.tx() as c:
        return store_bounds(c, folded)


class SqliteAgentStore(TopReads):
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
        self._readers_opening = 0  # reader connections being opened: counted against _max_readers
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
        try:
            self._executor, self._writer = await self._opening(self._open_writer)
        except (sqlite3.Error, OSError) as exc:
            if is_full(exc):
                raise StorageFull(self.agent_id) from exc
            raise Unavailable(f"cannot open {self.path}: {exc}") from exc

    async def _open_writer(self) -> tuple[ThreadPoolExecutor, SqliteWriter]:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sessionsearch-writer-{self.agent_id}")
        run, timeout_ms = partial(asyncio.get_running_loop().run_in_executor, executor), self._busy_timeout_ms
        try:
            if not self.path.exists():
                await run(partial(create_database, self.path, self.cold_dir, busy_timeout_ms=timeout_ms))
            writer = await run(partial(SqliteWriter, self.path, self.cold_dir, busy_timeout_ms=timeout_ms,
                                       rows_in_sql=self._rows_in_sql))
        except BaseException:
            executor.shutdown(wait=True)
            raise
        return executor, writer

    async def _opening(self, open_once: Callable[[], Awaitable[T]]) -> T:
        """`open_once()`; where it failed for want of files (files.py), again once the budget's idle
        stores released theirs. OutOfFiles (503) when it fails so with none to release or again."""
        try:
            return await open_once()
        except (sqlite3.Error, OSError) as exc:
            if not out_of_files(exc):
                raise
            if self._budget is None or not await self._budget.shed(self):
                raise no_files(self.agent_id, exc) from exc
        try:
            return await open_once()
        except (sqlite3.Error, OSError) as exc:
            if out_of_files(exc):
                raise no_files(self.agent_id, exc) from exc
            raise

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
            if out_of_files(exc):  # the turnstile's file, a temporary file: nothing was stored
                raise no_files(self.agent_id, exc) from exc
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
        while True:
            if self._readers.empty() and len(self._all_readers) + self._readers_opening < self._max_readers:
                # counted while it opens: borrowers meanwhile wait for it rather than open one each
                self._readers_opening += 1
                try:
                    opened = await self._opening(self._open_reader)
                finally:
                    self._readers_opening -= 1
                self._all_readers.append(opened)
                self._readers.put_nowait(opened)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SearchTimeout()
            if not self._readers.empty():
                reader = self._readers.get_nowait()
                break
            try:  # a while at most: the open waited for may fail, and then this borrower opens one
                reader = await asyncio.wait_for(self._readers.get(), min(remaining, READER_WAIT_S))
                break
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise SearchTimeout() from None
        reader.deadline = deadline
        try:
            yield reader
        except sqlite3.OperationalError as exc:
            if "interrupted" in str(exc):
                raise SearchTimeout() from None
            if out_of_files(exc):  # a temporary file a statement needed
                raise no_files(self.agent_id, exc) from exc
            raise
        finally:
            reader.deadline = math.inf
            if reader in self._all_readers:  # not released meanwhile (only when the budget is past)
                self._readers.put_nowait(reader)
            else:
                await reader.conn.close()

    async def _open_reader(self) -> _Reader:
        # not bound to its thread: search_tops runs it on another while it is borrowed
        conn = await aiosqlite.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            # mmap off by default: mapped all the time, searches got slower while appends or
            # reconciliation ran, the mapping following the growing file. A quiet reader maps it
            # (_fit_mapping). The first read opens the WAL and its shared memory: here, where a
            # want of files is retried (_opening), rather than in a search's first statement. One
            # script, one hop to the connection's thread: a store past the budget reopens often
            await conn.executescript(f"PRAGMA busy_timeout = {self._busy_timeout_ms}; PRAGMA query_only = 1; "
                                     f"PRAGMA mmap_size = {self._mmap_bytes}; "
                                     "SELECT count(*) FROM (SELECT 1 FROM sqlite_master LIMIT 1);")
            reader = _Reader(conn, self._mmap_bytes)
            await conn.set_progress_handler(reader.expired, PROGRESS_OPS)
        except BaseException:
            await conn.close()
            raise
        return reader

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

    async def import_many(self, items: list[tuple[Any, ...]]) -> list[Any]:
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
        # Rows indexed meanwhile (an ingest still running) may leave them past what a search takes
        # in: built again after a group of words only once the index stopped growing (the ingest
        # over), else once at the end of the pass. Rebuilt after every group while the rows kept
        # coming, each walk of a larger index was given up before it ended and the pass never
        # caught up (bench_fresh.py: no build ended in the 186 s from a 200,000-message ingest's start)
        prefix_build = await self._prefix_upkeep("first" if not incremental else None)
        seen = await asyncio.to_thread(built_rows, self.path)
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
            rows_now = await asyncio.to_thread(built_rows, self.path)
            quiet, seen = rows_now == seen, rows_now
            if quiet and await asyncio.to_thread(prefix_upkeep_at, self.path) == "stale":
                prefix_build = await self._prefix_upkeep("stale") or prefix_build
        if todo:  # the rows indexed during the words' reads: folded in, or the prefixes built again
            prefix_build = await self._prefix_upkeep(None) or prefix_build
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

    async def execute_write(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """Run one statement in its own write transaction (tests and maintenance)."""
        def job(writer: SqliteWriter) -> None:
            with writer.tx() as c:
                c.execute(sql, params)
        await self._run(job)

    # -- reads -------------------------------------------------------------------------------

    async def ping(self, reader: _Reader) -> None:
        await fetch_all(reader.conn, "SELECT 1 FROM windows LIMIT 1")

    async def newest(self, deadline: float = math.inf) -> Newest:
        """The agent's Newest (store/base.py), from memory while its files are unchanged (newest.py)."""
        at = time.time()
        stamp, kept = self._newest.stamp()
        if kept is not None:
            return kept
        async with self.reader(deadline) as reader:
            rows = await fetch_all(reader.conn, NEWEST_SQL)
        return self._newest.read(stamp, at, rows[0])

    def stamp(self) -> Stamp | None:
        """Its files' stamp now (newest.stamp_of)."""
        return self._newest.files()

    def newest_kept(self) -> tuple[Stamp | None, Newest | None]:
        """The files' stamp now and the Newest kept for it (None: to be read, newest_direct)."""
        return self._newest.stamp()

    def newest_direct(self, reader: _Reader, stamp: Stamp | None, stamped_at: float) -> Newest:
        """The agent's Newest read on the calling thread over the borrowed reader's own connection
        (search_many.newests), `stamp` taken at `stamped_at` (time.time) before the read."""
        return self._newest.read(stamp, stamped_at, reader.conn._conn.execute(NEWEST_SQL).fetchone())

    async def meta_version(self, reader: _Reader) -> int:
        version: int = (await fetch_all(reader.conn, "SELECT value FROM meta WHERE key = 'meta_version'"))[0][0]
        return version

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
            sessions = await fetch_all(conn, f"{self._SESSION_COLUMNS} WHERE s.meta_seq > ?", (since,))
            windows = await fetch_all(conn,
                "SELECT wid, session_key, session_id, cold FROM windows WHERE meta_seq > ?", (since,))
            gone = await fetch_all(conn, "SELECT kind, name FROM catalog_deleted WHERE meta_seq > ?", (since,))
            (horizon,), = await fetch_all(conn, "SELECT value FROM meta WHERE key = 'deleted_from'")
            if since >= horizon:
                return MetaSnapshot(version, False, [SessionMeta(*r) for r in sessions],
                                    [WindowMeta(*r) for r in windows],
                                    [name for kind, name in gone if kind == "session"],
                                    [int(name) for kind, name in gone if kind == "window"])
        sessions = await fetch_all(conn, self._SESSION_COLUMNS)
        windows = await fetch_all(conn, "SELECT wid, session_key, session_id, cold FROM windows")
        return MetaSnapshot(version, True, [SessionMeta(*r) for r in sessions], [WindowMeta(*r) for r in windows],
                            [], [])

    async def window_of(self, reader: _Reader, key: str, session_id: str | None) -> WindowRef | None:
        """The key's current window, or `session_id`'s if it is the key's."""
        if session_id is None:
            rows = await fetch_all(reader.conn,
                "SELECT w.wid, w.session_id, w.cold FROM sessions s JOIN windows w ON w.wid = s.current_wid "
                "WHERE s.session_key = ?", (key,))
        else:
            rows = await fetch_all(reader.conn,
                "SELECT wid, session_id, cold FROM windows WHERE session_key = ? AND session_id = ?",
                (key, session_id))
        return WindowRef(*rows[0]) if rows else None

    async def windows_of(self, reader: _Reader, key: str) -> list[WindowRef]:
        """Every window of a key, current first, then newest first."""
        rows = await fetch_all(reader.conn,
            "SELECT w.wid, w.session_id, w.cold FROM windows w LEFT JOIN sessions s ON s.session_key = w.session_key "
            "WHERE w.session_key = ? ORDER BY (w.wid = s.current_wid) DESC, w.wid DESC", (key,))
        return [WindowRef(*r) for r in rows]

    async def branch_rows(self, reader: _Reader, wid: int) -> list[BranchRow]:
        """The active branch's structural rows, in order."""
        rows: list[Any] = []
        for lo, hi in window_ranges(wid):
            rows += await fetch_all(reader.conn,
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
            out += await fetch_all(reader.conn,
                f"SELECT {seq_sql('id')}, event_id, role, ts, body FROM events WHERE id IN ({marks})", ids)
        return sorted((MessageRow(*r) for r in out), key=lambda r: r.seq)

    async def activity(self, reader: _Reader) -> tuple[int, dict[str, int]]:
        """The meta version, and each session's latest activity (epoch ms), read now: appends do
        not move the meta version, so the catalog's copy lags."""
        rows = await fetch_all(reader.conn,
            f"SELECT NULL, value FROM meta WHERE key = 'meta_version' UNION ALL SELECT s.session_key, {self._ACTIVITY}")
        return rows[0][1], dict(rows[1:])

    async def status(self, reader: _Reader) -> dict[str, int]:
        rows = await fetch_all(reader.conn,
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

    async def load_embeddings(self, reader: _Reader, model_no: int, dims: int) -> tuple[Packed, EmbeddingChanges]:
        return await meaning.load_embeddings(reader.conn, model_no, dims)

    async def fold_vectors(self) -> dict[str, Any] | None:
        return await meaning.fold_vectors(self.reader, self._run)

    async def indexed_rows(self, reader: _Reader, rids: list[int]) -> list[RowHit]:
        return await meaning.indexed_rows(reader.conn, rids)

    async def embed_status(self, reader: _Reader, model: str) -> dict[str, int]:
        return await meaning.embed_status(reader.conn, model)

    async def index_rows(self, reader: _Reader, wid: int) -> list[int]:
        """Ids of the index rows of a window (for checks and tests)."""
        rows: list[tuple[Any, ...]] = []
        for lo, hi in window_ranges(wid):
            rows += await fetch_all(reader.conn,
                "SELECT rowid FROM msg_fts WHERE rowid BETWEEN ? AND ? ORDER BY rowid", (lo, hi))
        return [r[0] for r in rows]

    def rebuilding_beside(self, wid: int) -> bool:
        """Whether this process's writer is rebuilding the window beside another one right now."""
        return self._writer is not None and wid in self._writer.rebuilding

    async def is_clean(self, wid: int) -> bool:
        """Whether the window is indexed and unclaimed as last committed: read without the writer, so a
        job whose window was rebuilt beside another's finishes while the writer is busy."""
        async with self.reader() as reader:
            rows = await fetch_all(reader.conn,
                "SELECT 1 FROM windows WHERE wid = ? AND needs_rebuild = 0 AND (claim_token IS NULL "
                "OR claim_expires_at < ?)", (wid, time.time()))
        return bool(rows)
