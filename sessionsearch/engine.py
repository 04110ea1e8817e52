"""The engine: one object per data dir, with async methods for every operation (the Python API).

    async with Engine("./data") as engine:
        await engine.append(AppendParams(sessionKey="agent:main:main", events=[{"type": "message", ...}]))
        hits = await engine.search(SearchParams(query="loan"))

Each method takes its request as declared in protocol/ and answers its declared result; the doors
(HTTP, the agent tools, MCP, the CLI) turn wire bodies into those requests.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import structlog

from .embed import Embedder, open_embedder
from .errors import InvalidRequest, NotFound, Unavailable
from .indexer.embedding import EMBED_BATCH_ROWS, EmbedResult, embed_window
from .indexer.reconcile import ReconcileResult, reconcile_window
from .keys import agent_of, check_agent_id
from .protocol import (
    AppendParams,
    AppendResult,
    ArchiveResult,
    DeleteResult,
    HistoryParams,
    HistoryResult,
    ListedSession,
    ListParams,
    ListResult,
    RestoreResult,
    RotateParams,
    RotateResult,
    SearchParams,
    SearchResult,
    SessionRef,
    StatusParams,
    StatusResult,
    UpsertParams,
    UpsertResult,
)
from .protocol.reads import DEFAULT_LIST_LIMIT
from .search.catalog import CatalogCache, CatalogView
from .search.context import SearchContext
from .search.cost import CredentialGate
from .search.history import history as run_history
from .search.listing import encode_cursor, fit_listing
from .search.listing import entry as listing_entry
from .search.runner import search as run_search
from .search.scope import SessionScope
from .search.scope import select as select_sessions
from .search.vectors import Meaning, Vectors
from .search.visibility import Viewer
from .settings import Settings
from .store import backend_for
from .store.base import AgentStore
from .transcript.events import parse_event
from .values import check_stored_name

log = structlog.get_logger("sessionsearch.engine")

# enqueue(dirty windows by agent) -> whether the queue was reached
Enqueuer = Callable[[dict[str, set[int]]], Awaitable[bool]]



class Engine:
    """Sessions, transcripts, search and history over one data dir."""

    def __init__(self, data_dir: str | Path | None = None, *, settings: Settings | None = None,
                 enqueuer: Enqueuer | None = None, reconcile_rows_in_sql: bool = False,
                 embedder: Embedder | None = None) -> None:
        """`reconcile_rows_in_sql`: reconciliation inserts index rows with one INSERT … SELECT
        (what a worker process's engine uses). `embedder`: the meaning index's, instead of the one
        the settings name (loaded on first use)."""
        self.settings = settings or Settings()
        self.data_dir = Path(data_dir if data_dir is not None else self.settings.data_dir)
        self.backend = backend_for(self.settings, data_dir=self.data_dir, rows_in_sql=reconcile_rows_in_sql)
        self.enqueuer = enqueuer
        self._stores: dict[str, AgentStore[Any]] = {}
        self._open_lock = asyncio.Lock()
        self._catalog = CatalogCache(self._open_stores, self.store, self.backend.listing_version)
        self.search_observer: Callable[[float, bool], None] | None = None
        self._written: set[str] = set()  # agents appended to since take_written (embedded embed sweeps)
        self.gate = CredentialGate.from_settings(self.settings)  # what a scoped token may hold at once
        # the meaning index: the embedder, loaded on first use, and the vectors searches hold
        self._embedder: Embedder | None = embedder
        self._embedder_lock = asyncio.Lock()
        self._vectors = Vectors()
        # the embed job's enqueue: the queue's (queue/actors.py) when the reconcile enqueuer is its
        owner = getattr(enqueuer, "__self__", None)
        self.embed_enqueuer: Enqueuer | None = getattr(owner, "enqueue_embed", None)

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> Engine:
        await self.backend.open()
        for agent_id in self.agent_ids_on_disk():
            await self.store(agent_id)
        await self.catalog_view()  # warm: the first search should not pay for reading the catalog
        return self

    async def close(self) -> None:
        if self._embedder is not None:
            embedder, self._embedder = self._embedder, None
            await embedder.aclose()
        await self._vectors.aclose()
        stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            await store.close()
        await self.backend.close()
        self._catalog.clear()

    async def __aenter__(self) -> Engine:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def agent_ids_on_disk(self) -> list[str]:
        """Ids of the agents that have a store, sorted."""
        return self.backend.agent_ids()

    async def store(self, agent_id: str, *, create: bool = False) -> AgentStore[Any]:
        store = self._stores.get(agent_id)
        if store is not None:
            return store
        async with self._open_lock:
            if agent_id in self._stores:
                return self._stores[agent_id]
            store = await self.backend.open_store(agent_id, create=create)
            self._stores[agent_id] = store
            self._catalog.opened()
            return store

    # -- the catalog search scopes with ----------------------------------------------------

    async def catalog_view(self, deadline: float = math.inf, *, refresh: bool = False,
                           fresh_listing: bool = False) -> CatalogView:
        """The session catalog as of the agents' current meta versions (see CatalogCache.view)."""
        return await self._catalog.view(deadline, refresh=refresh, fresh_listing=fresh_listing)

    async def meta_version(self, agent_id: str, deadline: float = math.inf) -> int:
        """The agent's meta version as committed now (a view holding another one is stale)."""
        return await self._catalog.meta_version(agent_id, deadline)

    async def _open_stores(self) -> dict[str, AgentStore[Any]]:
        """Every agent's store, opened; another process may have created some since the last call."""
        for agent_id in self.agent_ids_on_disk():
            await self.store(agent_id)
        return dict(self._stores)

    def _meta_changed(self, agent_id: str) -> None:
        self._catalog.invalidate(agent_id)

    # -- writes ------------------------------------------------------------------------------

    async def upsert_session(self, params: UpsertParams) -> UpsertResult:
        """`sessions.upsert`: set (or, with null, clear) a session's metadata; creates the session."""
        key = params.session_key
        store = await self.store(agent_of(key), create=True)
        created = await store.upsert_session(key, params.fields())
        self._meta_changed(store.agent_id)
        log.info("session.upserted", agent=store.agent_id, created=created)
        return {"sessionKey": key, "created": created}

    async def append(self, params: AppendParams, *, index: bool = True) -> AppendResult:
        """`transcript.append`: store events; a linear batch is indexed in the same transaction. All-or-nothing."""
        key = params.session_key
        now = int(time.time() * 1000)
        parsed = [parse_event(raw, f"events[{i}]", now_ms=now) for i, raw in enumerate(params.events)]
        for i, event in enumerate(parsed):
            for name, value in (("id", event.event_id), ("parentId", event.parent), ("targetId", event.target_id),
                                ("firstKeptEntryId", event.first_kept_id)):
                if value is not None:
                    check_stored_name(value, f"events[{i}].{name}")
        store = await self.store(agent_of(key), create=True)
        result = await store.append(key, parsed, session_id=params.session_id, index=index)
        self._catalog.note_window(store.agent_id, key, result.session_id)
        self._written.add(store.agent_id)
        return {"appended": result.appended, "indexed": result.indexed, "needsReconcile": result.needs_reconcile,
                "sessionId": result.session_id, "duplicates": result.duplicates}

    async def rotate(self, params: RotateParams) -> RotateResult:
        """`sessions.rotate`: start a new window of the session."""
        key = params.session_key
        store = await self._existing_store(key)
        new_id, previous = await store.rotate(key, params.session_id)
        self._meta_changed(store.agent_id)
        log.info("session.rotated", agent=store.agent_id, session_id=new_id, previous_session_id=previous)
        return {"sessionKey": key, "sessionId": new_id, "previousSessionId": previous}

    async def delete(self, params: SessionRef) -> DeleteResult:
        """`sessions.delete`: the session, its transcript and its index rows."""
        key = params.session_key
        store = await self._existing_store(key)
        deleted = await store.delete_session(key)
        self._meta_changed(store.agent_id)
        if not deleted:
            raise NotFound(f"session {key!r} not found")
        log.info("session.deleted", agent=store.agent_id)
        return {"sessionKey": key, "deleted": True}

    async def archive(self, params: SessionRef) -> ArchiveResult:
        """`sessions.archive`: move the session's windows out of search."""
        key = params.session_key
        store = await self._existing_store(key)
        moved = await store.archive(key)
        self._meta_changed(store.agent_id)
        return {"sessionKey": key, "archivedWindows": moved}

    async def restore(self, params: SessionRef) -> RestoreResult:
        """`sessions.restore`: bring an archived session's windows back (reindexed by the queue)."""
        key = params.session_key
        store = await self._existing_store(key)
        wids = await store.restore(key)
        self._meta_changed(store.agent_id)
        if wids:
            await self.enqueue_reconcile({store.agent_id: set(wids)})
        return {"sessionKey": key, "restoredWindows": len(wids)}

    async def _existing_store(self, key: str) -> AgentStore[Any]:
        try:
            return await self.store(agent_of(key))
        except NotFound:
            raise NotFound(f"session {key!r} not found") from None

    # -- reads -------------------------------------------------------------------------------

    async def search(self, params: SearchParams, *, agent_facing: bool = False,
                     time_limit_ms: int | None = None) -> SearchResult:
        """`sessions.search`. `time_limit_ms` narrows the search's time budget (a scoped token's, search/cost.py)."""
        req = params.request()
        if req.mode != "keyword" and self.settings.embedder == "none":
            raise InvalidRequest("semantic search is disabled", field="mode")
        settings = self.settings
        if time_limit_ms is not None and time_limit_ms < settings.search_time_limit_ms:
            settings = settings.replace(search_time_limit_ms=time_limit_ms)
        context = SearchContext(settings, self._catalog, self.backend, self,
                                Meaning(self._vectors, self.settings.semantic_min_score))
        found = await run_search(req, context, agent_facing=agent_facing)
        return cast(SearchResult, found)  # search/runner.py builds the wire shape as a dict

    async def history(self, params: HistoryParams, *, restore: bool = True) -> HistoryResult:
        """`sessions.history`: the newest tail of the current view, or the window around a message.
        Opening an archived session restores it; with `restore` False (a read-only caller) such a read
        is refused (Conflict) and the session stays archived."""
        req = params.request(self.settings.history_default_limit)
        found = await run_history(req, settings=self.settings, catalog=self._catalog, open_store=self.store,
                                  restore=self._restore_key if restore else None)
        return cast(HistoryResult, found)  # search/history.py builds the wire shape as a dict

    async def _restore_key(self, key: str) -> RestoreResult:
        return await self.restore(SessionRef(sessionKey=key))

    async def list_sessions(self, params: ListParams | None = None) -> ListResult:
        """`sessions.list`: sessions the caller may see, newest activity first, optionally filtered by a
        title search or a scope, a page at a time (`cursor`, `nextCursor`)."""
        params = params or ListParams()
        agent_id, search, scope = params.agent_id, params.search, params.scope
        limit = params.limit or DEFAULT_LIST_LIMIT
        palette = bool(params.palette)
        include_archived = params.include_archived is not False
        view = await self.catalog_view(fresh_listing=True)  # every agent there is now, not a moment ago
        if agent_id is not None and agent_id not in view.agents:
            # one that may not see such an agent lists nothing whether it exists or not: the same answer
            if Viewer(self.settings, params.requester, view.catalog).may_target_agent(agent_id):
                raise NotFound(f"agent {agent_id!r} not found")
            return {"sessions": []}
        agents = [agent_id] if agent_id is not None else view.agent_ids
        if scope is not None:
            agents = scope.agents(agents)
        stores = [await self.store(agent) for agent in agents]
        if params.requester is not None:
            # visibility reads the catalog (the spawn tree): another process may have changed it since
            newest = await self.backend.newest(stores, math.inf)
            stale = [store.agent_id for store, n in zip(stores, newest, strict=True)
                     if n.meta_version != view.versions.get(store.agent_id)]
            for agent in stale:
                self._catalog.invalidate(agent)
            if stale:
                view = await self.catalog_view()
        viewer = Viewer(self.settings, params.requester, view.catalog)
        # the filters run in the store, newest activity first from the cursor on (search/scope.py select)
        rows, more = await select_sessions(self.backend, stores, scope or SessionScope(), viewer, title=search,
                                           palette=palette, archived=include_archived, after=params.cursor,
                                           limit=limit)
        out = [cast(ListedSession, listing_entry(meta, viewer, meta.updated_at)) for meta in rows]
        listing = fit_listing(cast(list[dict[str, Any]], out), max_bytes=self.settings.list_response_max_bytes,
                              more=more, paged=True)
        kept = listing["sessions"]
        if kept and (more or len(kept) < len(out)):
            last = kept[-1]
            listing["nextCursor"] = encode_cursor((last["updatedAt"], last["sessionKey"]))
        return cast(ListResult, listing)

    async def index_status(self, params: StatusParams | None = None) -> StatusResult:
        """`index.status`: per agent, windows and messages indexed, the backlog and completeness."""
        agent_id = params.agent_id if params is not None else None
        agents = [agent_id] if agent_id is not None else self.agent_ids_on_disk()
        out: list[Any] = []
        for agent_id in agents:
            store = await self.store(agent_id)
            async with store.reader() as reader:
                counts = await store.status(reader)
            total = counts["messages"]
            completeness = 1.0 if total == 0 else round(counts["indexedMessages"] / total, 6)
            entry = {"agentId": agent_id, "windows": counts["windows"],
                     "indexedWindows": counts["indexedWindows"], "backlog": counts["backlog"],
                     "messages": total, "indexedMessages": counts["indexedMessages"],
                     "completeness": completeness, "embeddedMessages": 0, "embeddingBacklog": 0}
            embedder = await self.embedder()
            if embedder is not None:
                async with store.reader() as reader:
                    entry.update(await store.embed_status(reader, embedder.model))
            out.append(entry)
        return {"agents": out}

    async def check_ready(self, *, every_store: bool = True) -> None:
        """Raise Unavailable unless writes can be stored and (`every_store`) every agent's store answers."""
        await self.backend.check_ready()
        if self.backend.shared_database or not every_store:
            return  # in one database the backend's check has just read every agent's
        for agent_id in self.agent_ids_on_disk():
            store = await self.store(agent_id)
            try:
                async with store.reader(time.monotonic() + 5) as reader:
                    await store.ping(reader)
            except Exception as exc:
                raise Unavailable(f"agent {agent_id} database is not answering: {exc}") from exc

    # -- reconciliation ------------------------------------------------------------------------

    async def enqueue_reconcile(self, dirty: dict[str, set[int]]) -> bool:
        """Ask the queue to reconcile these windows; False when it could not be reached."""
        if self.enqueuer is None or not dirty:
            return True
        try:
            return await self.enqueuer(dirty)
        except Exception:
            log.warning("search.enqueue_failed", agents=len(dirty), exc_info=True)
            return False

    async def reconcile(self, agent_id: str, wid: int, *, should_stop: Callable[[], bool] | None = None,
                        more_s: float = 0.0) -> ReconcileResult:
        """Rebuild one window's index rows from its active branch (what a worker job runs); with
        `more_s`, go on with the small windows waiting next to it for that long."""
        store = await self.store(agent_id)
        return await reconcile_window(store, wid, batch_rows=self.settings.reconcile_batch_rows,
                                      lease_s=self.settings.claim_lease_s, should_stop=should_stop, more_s=more_s)

    # -- the meaning index -------------------------------------------------------------------------

    async def embedder(self) -> Embedder | None:
        """The configured embedder, loaded once (None when it is `none`)."""
        if self._embedder is None and self.settings.embedder != "none":
            async with self._embedder_lock:
                if self._embedder is None:
                    self._embedder = await asyncio.to_thread(open_embedder, self.settings)
        return self._embedder

    async def enqueue_embed(self, pending: dict[str, set[int]]) -> bool:
        """Ask the queue to embed these windows' pending rows; False when it could not be reached."""
        if self.embed_enqueuer is None or not pending:
            return True
        try:
            return await self.embed_enqueuer(pending)
        except Exception:
            log.warning("search.embed_enqueue_failed", agents=len(pending), exc_info=True)
            return False

    async def embed(self, agent_id: str, wid: int, *, should_stop: Callable[[], bool] | None = None,
                    observe: Callable[[str, float, int], None] | None = None) -> EmbedResult:
        """Embed one window's pending rows (what an embed job runs); raises EmbedderFailed."""
        embedder = await self.embedder()
        if embedder is None:
            return EmbedResult("disabled")
        store = await self.store(agent_id)
        return await embed_window(store, embedder, wid, batch_rows=EMBED_BATCH_ROWS,
                                  lease_s=self.settings.claim_lease_s, should_stop=should_stop, observe=observe)

    async def embed_backlog(self, agent_id: str | None = None) -> dict[str, set[int]]:
        """Windows with rows waiting for an embedding of the current model, by agent (every warm
        window while the store has not taken this model yet); never an incognito session's, whose
        text no embedder is given (store/*/meaning.py `embeddable`)."""
        embedder = await self.embedder()
        if embedder is None:
            return {}
        out: dict[str, set[int]] = {}
        for agent in [agent_id] if agent_id else self.agent_ids_on_disk():
            store = await self.store(agent)
            async with store.reader() as reader:
                head = await store.meaning_head(reader, embedder.model)
            if head.model_no is not None and head.current_no == head.model_no:
                out[agent] = set(head.pending)
            else:
                self._catalog.invalidate(agent)
                view = await self.catalog_view()
                out[agent] = set(view.agents[agent].visible_hot) if agent in view.agents else set()
        return out

    def take_written(self) -> set[str]:
        """The agents appended to through this engine since the last call."""
        written, self._written = self._written, set()
        return written

    async def embed_pending(self, agent_id: str | None = None) -> dict[str, int]:
        """Embed every window with rows waiting, now, in this process. Returns windows by outcome."""
        outcomes: dict[str, int] = {}
        for agent, wids in (await self.embed_backlog(agent_id)).items():
            for wid in sorted(wids):
                result = await self.embed(agent, wid)
                outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
        return outcomes

    async def pending(self, agent_id: str | None = None) -> dict[str, list[int]]:
        """Windows needing reconciliation, by agent."""
        agents = [agent_id] if agent_id else self.agent_ids_on_disk()
        return {a: await (await self.store(a)).dirty_windows() for a in agents}

    async def reconcile_pending(self, agent_id: str | None = None,
                                progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
        """Drain every window needing reconciliation now, in this process. Returns windows by outcome."""
        work = [(a, w) for a, wids in (await self.pending(agent_id)).items() for w in wids]
        outcomes: dict[str, int] = {}
        published_beside: set[tuple[str, int]] = set()
        for done, (agent, wid) in enumerate(work, 1):
            if (agent, wid) not in published_beside:  # else it was rebuilt with an earlier window
                result = await self.reconcile(agent, wid)
                outcomes[str(result.outcome)] = outcomes.get(str(result.outcome), 0) + 1 + len(result.beside)
                published_beside.update((agent, w) for w in result.beside)
            if progress:
                progress(done, len(work))
        swept = await self.sweep_orphans(agent_id)
        if swept:
            outcomes["swept"] = outcomes.get("swept", 0) + swept
        return outcomes

    async def sweep_orphans(self, agent_id: str | None = None) -> int:
        """Delete index rows whose window is gone or archived, or whose row left the branch; returns how many."""
        return sum([await (await self.store(a)).sweep_orphans()
                    for a in ([agent_id] if agent_id else self.agent_ids_on_disk())])

    async def optimize(self, agent_id: str | None = None, **limits: Any) -> dict[str, Any]:
        """Build what answers one-word searches for common words fast (SQLite: postings,
        store/sqlite/postings.py), per agent; `limits`: min_docs (default: the setting
        postings_min_docs, else the backend's own), min_share, max_words."""
        if self.settings.postings_min_docs is not None:
            limits.setdefault("min_docs", self.settings.postings_min_docs)
        agents = [check_agent_id(agent_id)] if agent_id else self.agent_ids_on_disk()
        return {"agents": {a: await (await self.store(a)).optimize(**limits) for a in agents}}

    async def postings_due(self) -> dict[str, str]:
        """The agents whose postings would pay off now, each with why (store.postings_due)."""
        due = {}
        for agent in self.agent_ids_on_disk():
            why = await (await self.store(agent)).postings_due(min_docs=self.settings.postings_min_docs,
                                                               grow_share=self.settings.postings_grow_share)
            if why is not None:
                due[agent] = why
        return due

    def observe_search(self, seconds: float, indexing: bool) -> None:
        if self.search_observer is not None:
            self.search_observer(seconds, indexing)
