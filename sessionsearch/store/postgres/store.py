"""One agent's store on PostgreSQL (an AgentStore, store/base.py): its rows are those of the
shared tables keyed by its number; the pool is the backend's, shared by every agent."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import psycopg

from ...transcript.events import Event
from .. import packed
from ..base import (
    AppendResult,
    BranchRow,
    EmbeddingChanges,
    Match,
    MeaningHead,
    MessageRow,
    MetaSnapshot,
    ReconcileTx,
    RowHit,
    SessionTop,
    SessionTops,
    TopHits,
    WindowRef,
)
from ..packed import Packed
from . import bounds, meaning, postings, postings_build, reads
from .db import Db, Reader
from .lexemes import read_text
from .query import DfCache, Query, cached_docs
from .reconcile import Reconciler
from .search import search_top
from .sessions import search_sessions
from .wide import is_wide, wide_sessions, wide_top
from .writer import Writes

T = TypeVar("T")


class PgAgentStore:
    writes_await_server = True

    def __init__(self, db: Db, agent_id: str, ano: int, *,
                 listing_seen: Callable[[int, float], None] | None = None, reconcile_slots: int) -> None:
        """`listing_seen(version, at)` is told the agent listing's version each search read
        (backend.py), `at` the time.monotonic() before it began."""
        self.db = db
        self._listing_seen = listing_seen
        self.agent_id = agent_id
        self.ano = ano
        self._writes = Writes(agent_id, ano)
        self._reconcile = Reconciler(ano, reconcile_slots)
        self._dfs = DfCache()

    @property
    def dfs(self) -> DfCache:
        """What this store's searches keep between them (a search of many agents reads and fills it)."""
        return self._dfs

    async def close(self) -> None:
        """Nothing of its own to release: the pool is the backend's."""

    def reader(self, deadline: float = math.inf) -> AbstractAsyncContextManager[Reader]:
        return self.db.reader(deadline)

    # -- writes ------------------------------------------------------------------------------

    async def upsert_session(self, key: str, fields: dict[str, Any]) -> bool:
        return await self.db.tx(self._writes.upsert_session, key, fields)

    async def append(self, key: str, events: list[Event], *, session_id: str | None = None,
                     index: bool = True, source_lines: int | None = None) -> AppendResult:
        return await self.db.tx(self._writes.append, key, events, session_id, index, source_lines)

    async def rotate(self, key: str, session_id: str | None) -> tuple[str, str | None]:
        return await self.db.tx(self._writes.rotate, key, session_id)

    async def delete_session(self, key: str) -> bool:
        return await self.db.tx(self._writes.delete_session, key)

    async def archive(self, key: str) -> int:
        return await self.db.tx(self._writes.archive, key)

    async def restore(self, key: str) -> list[int]:
        return await self.db.tx(self._writes.restore, key)

    async def all_source_lines(self) -> dict[str, int]:
        async with self.reader() as r:
            return dict(await r.all("SELECT session_id, source_lines FROM ss_windows WHERE ano = %s", (self.ano,)))

    async def import_many(self, items: list[tuple[Any, ...]]) -> list[Any]:
        """Import steps in one transaction; when it fails, each step alone (its slot then holds
        its error)."""
        try:
            return await self.db.tx(self._writes.import_steps, items)
        except Exception:
            pass
        out: list[Any] = []
        for item in items:
            try:
                out.append(await self.db.tx(self._writes.import_step, *item))
            except Exception as exc:  # reported by the importer against that file
                out.append(exc)
        return out

    async def dirty_windows(self) -> list[int]:
        return await self.db.tx(self._reconcile.dirty_windows)

    async def optimize(self, *, min_docs: int | None = None, min_share: float = postings_build.MIN_SHARE,
                       max_words: int = postings_build.MAX_WORDS, incremental: bool = False) -> dict[str, Any]:
        """Refresh the tables' planner statistics (ANALYZE: a bulk import leaves them stale until
        autovacuum comes by; the tables hold every agent, so this is not per agent), then build
        the agent's postings of common words and prefixes (postings_build.py). A build always
        redoes the whole agent (`incremental` changes nothing): its cost is one pass over the rows."""
        await self.db.tx(_analyze)
        min_docs = postings_build.MIN_DOCS if min_docs is None else min_docs
        out = await postings_build.build(self.db, self.ano, min_docs=min_docs, min_share=min_share,
                                         max_words=max_words)
        self._dfs.postings_terms = None  # this process's searches read the new terms at once
        return {**out, "dropped": [], "bounds": await self.fold_bounds()}

    async def fold_bounds(self) -> dict[str, Any]:
        """The agent's score bounds (bounds.py) as of its index now ({} past MAX_ROWS rows)."""
        return await bounds.fold(self.db, self.ano)

    async def postings_due(self, *, min_docs: int | None, grow_share: float) -> str | None:
        """Why a postings build is due (postings_build.py), else "bounds" when only the score
        bounds would be folded again (bounds.py), or None."""
        min_docs = postings_build.MIN_DOCS if min_docs is None else min_docs
        async with self.reader() as r:
            why = await postings_build.postings_due(r, self.ano, min_docs=min_docs, grow_share=grow_share)
            if why is None and await bounds.bounds_due(r, self.ano):
                return "bounds"
            return why

    # -- reconciliation ----------------------------------------------------------------------

    async def reconcile_tx(self, step: Callable[[ReconcileTx], Awaitable[T]]) -> T:
        """Run a reconciliation step (indexer/reconcile.py) as one transaction."""
        try:
            return await self.db.tx(self._reconcile.step, step)
        finally:
            self._reconcile.rebuilding = frozenset()

    def rebuilding_beside(self, wid: int) -> bool:
        return wid in self._reconcile.rebuilding

    async def is_clean(self, wid: int) -> bool:
        async with self.reader() as r:
            return await r.one("SELECT 1 FROM ss_windows WHERE wid = %s AND needs_rebuild = 0 AND (claim_token IS NULL "
                               "OR claim_expires_at < extract(epoch FROM clock_timestamp()))", (wid,)) is not None

    async def sweep_orphans(self) -> int:
        return await self.db.tx(self._reconcile.sweep_orphans)

    # -- reads -------------------------------------------------------------------------------

    async def ping(self, reader: Reader) -> None:
        await reader.one("SELECT 1 FROM ss_agents WHERE ano = %s", (self.ano,))

    async def meta_version(self, reader: Reader) -> int:
        return await reads.meta_version(reader, self.ano)

    async def meta_snapshot(self, reader: Reader, since: int | None = None) -> MetaSnapshot:
        return MetaSnapshot(*await reads.meta_snapshot(reader, self.ano, since))

    async def search_top(self, reader: Reader, match: Match, *, k: int, order: str, include: list[int] | None,
                         exclude: list[int] | None, role: str | None, hot: str | None = None,
                         since: int | None = None, until: int | None = None, ties: bool = True) -> TopHits:
        at = time.monotonic()
        q = Query(match.cut(cached_docs(match, [self._dfs])))  # an any-word query: its rarest words
        scope: dict[str, Any] = dict(include=include, exclude=exclude, role=role, since=since, until=until)
        # one word or one short prefix by relevance, from its postings when they answer
        found = await postings.postings_top(reader, self.ano, q, self._dfs, k=k, **scope) if order != "recent" else None
        if found is None and is_wide(q):  # many words: a statement of fixed size (wide.py)
            found = await wide_top(reader, self.ano, q, self._dfs, k=k, order=order, **scope)
        out = found if found is not None else await search_top(reader, self.ano, q, self._dfs, k=k, order=order,
                                                               **scope)
        self._seen(at)
        version, dirty, hits = out
        # NUL as stored (lexemes.stored_text)
        return TopHits(version, dirty, [RowHit(h[0], h[1], h[2], h[3], read_text(h[4])) for h in hits])

    async def search_sessions(self, reader: Reader, match: Match, *, k: int,
                              order: str, include: list[int] | None, exclude: list[int] | None, role: str | None,
                              since: int | None = None, until: int | None = None, hot: str | None = None
                              ) -> SessionTops:
        at = time.monotonic()
        scope: dict[str, Any] = dict(include=include, exclude=exclude, role=role, since=since, until=until)
        q = Query(match) if match is not None and match.words else None
        if q is not None and is_wide(q):  # many words: a statement of fixed size (wide.py)
            version, dirty, found = await wide_sessions(reader, self.ano, q, self._dfs, k=k, order=order, **scope)
        else:
            version, dirty, found = await search_sessions(reader, self.ano, match, self._dfs, k=k, order=order,
                                                          **scope)
        self._seen(at)
        tops = [SessionTop(key, n, RowHit(best[0], best[1], best[2], best[3], read_text(best[4])))
                for key, n, best in found]
        return SessionTops(version, dirty, tops)

    def _seen(self, at: float) -> None:
        if self._listing_seen is not None and self._dfs.listing:
            self._listing_seen(self._dfs.listing, at)

    async def window_of(self, reader: Reader, key: str, session_id: str | None) -> WindowRef | None:
        found = await reads.window_of(reader, self.ano, key, session_id)
        return None if found is None else WindowRef(*found)

    async def windows_of(self, reader: Reader, key: str) -> list[WindowRef]:
        return [WindowRef(*w) for w in await reads.windows_of(reader, self.ano, key)]

    async def branch_rows(self, reader: Reader, wid: int) -> list[BranchRow]:
        return [BranchRow(*r) for r in await reads.branch_rows(reader, wid)]

    async def message_rows(self, reader: Reader, wid: int, seqs: list[int]) -> list[MessageRow]:
        return [MessageRow(*r) for r in await reads.message_rows(reader, wid, seqs)]

    async def activity(self, reader: Reader) -> tuple[int, dict[str, int]]:
        return await reads.activity(reader, self.ano)

    async def status(self, reader: Reader) -> dict[str, int]:
        return await reads.status(reader, self.ano)

    async def meaning_head(self, reader: Reader, model: str) -> MeaningHead:
        return await meaning.meaning_head(reader, self.ano, model)

    async def embedding_changes(self, reader: Reader, model_no: int, embed_seq: int, gone_seq: int
                                ) -> EmbeddingChanges:
        return await meaning.embedding_changes(reader, self.ano, model_no, embed_seq, gone_seq)

    async def load_embeddings(self, reader: Reader, model_no: int, dims: int) -> tuple[Packed, EmbeddingChanges]:
        return await meaning.load_embeddings(reader, self.ano, model_no, dims)

    async def fold_vectors(self) -> dict[str, Any] | None:
        started = time.monotonic()
        async with self.reader() as r:
            gen, rows, since, mno, dims = await meaning.fold_state(r, self.ano)
            if not mno or not packed.fold_due(rows, since):
                return None
            held, changes = await meaning.load_embeddings(r, self.ano, mno, dims)
        folded = await asyncio.to_thread(packed.with_changes, held, changes, dims)
        if not await self.db.tx(meaning.store_fold, self.ano, gen, folded):
            return None
        return {"rows": len(folded), "since": since, "seconds": round(time.monotonic() - started, 3)}

    async def indexed_rows(self, reader: Reader, rids: list[int]) -> list[RowHit]:
        return await meaning.indexed_rows(reader, rids)

    async def embed_status(self, reader: Reader, model: str) -> dict[str, int]:
        return await meaning.embed_status(reader, self.ano, model)

    async def index_rows(self, reader: Reader, wid: int) -> list[int]:
        """Ids of the index rows of a window (checks and tests)."""
        return await reads.index_rows(reader, wid)

    async def execute_write(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """Run one statement in its own transaction (tests and maintenance only)."""
        async def job(conn: psycopg.AsyncConnection) -> None:
            await conn.execute(sql, params or None)
        await self.db.tx(job)


async def _analyze(conn: psycopg.AsyncConnection) -> None:
    for table in ("ss_windows", "ss_events", "ss_index"):
        await conn.execute(f"ANALYZE {table}")
