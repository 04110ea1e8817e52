"""The PostgreSQL shape: every agent in one database, one connection pool per process.

`open` applies the pending migrations (migrate.py, under an advisory lock) and opens the pool.
The agent listing is read with a short synchronous query (the Backend interface reads it without
an event loop), on one small connection of its own that is remade after a failure; when the
database does not answer, the last listing read is kept.

Every search reads the listing's version (the highest agent number: agents are only added) in its
own statement (search.py's HEAD) and hands it here, so `listing_version` answers from memory while
searches run: a probe costs a round trip that blocks the event loop (most of the fixed cost of a
rare word). The version is read anew by a probe only when no search brought it for
LISTING_TTL_S, or when a caller asks for it fresh (an agent it was asked for and does not know).
A search whose statement saw an agent its scope did not know is scoped again (search/runner.py).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, cast

import psycopg

from ...errors import NotFound
from ...settings import Settings
from ..base import AgentStore, Match, Newest, QueryFeatures, RosterQuery, RowHit, ScoreBound, SessionMeta, TopHits
from ..cut import top_of_all
from ..urls import redact
from .bounds import score_bounds
from .db import CONNECT_TIMEOUT_S, Db, connect_kwargs, unavailable
from .features import FEATURES, query_features
from .lexemes import read_text
from .meaning import embeddable
from .migrate import LATEST, migrate, migrate_connection, schema_version
from .newest import read_newest
from .query import Query, cached_docs
from .roster import read_keys, read_roster
from .search_many import search_many
from .store import PgAgentStore
from .terms import FRESH_LIMIT
from .wide import is_wide

POOL_SIZE = 10  # connections per process at most (docs/postgres.md)
RETRY_S = 1.0  # after a failed listing read, the cached listing is answered this long
LISTING_TTL_S = 1.0  # a listing version read this recently (by a probe or a search) is answered as is


class _Probe:
    """A synchronous connection for the reads made without an event loop (listing, metrics)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()
        self._failed_at = 0.0

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]] | None:
        """The rows of one statement, or None when the database does not answer now."""
        with self._lock:
            if time.monotonic() - self._failed_at < RETRY_S:
                return None
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self.url, **connect_kwargs())
                return self._conn.execute(sql, params).fetchall()
            except psycopg.Error:
                self._failed_at = time.monotonic()
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                return None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class PgBackend:
    """The agents of one PostgreSQL database (a Backend, store/base.py)."""

    shared_database = True
    features = FEATURES

    def __init__(self, url: str, settings: Settings, *, pool_size: int = POOL_SIZE) -> None:
        self.url = url
        self.settings = settings
        self.db = Db(url, max_size=pool_size)
        self._probe = _Probe(url)
        self._ready_conn: psycopg.AsyncConnection | None = None  # check_ready's own
        self._ready_lock = asyncio.Lock()
        self._agents: dict[str, int] = {}  # as last read
        self._listing = 0  # the highest agent number as last read (by a probe or a search's statement)
        self._listing_at = -math.inf  # when (time.monotonic)

    async def open(self) -> None:
        try:
            async with await psycopg.AsyncConnection.connect(self.url, **connect_kwargs()) as conn:
                await migrate_connection(conn)
        except psycopg.OperationalError as exc:
            raise unavailable(exc) from exc
        await self.db.open()

    async def close(self) -> None:
        await self.db.close()
        self._probe.close()
        if self._ready_conn is not None:
            await self._ready_conn.close()
            self._ready_conn = None

    def describe(self) -> str:
        return f"PostgreSQL {redact(self.url)}"

    async def schema_version(self) -> dict[str, Any]:
        try:
            version = await schema_version(self.url)
        except psycopg.OperationalError as exc:
            raise unavailable(exc) from exc
        return {"store": "postgresql", "database": self.describe(), "version": version, "latest": LATEST}

    async def migrate(self) -> list[dict[str, Any]]:
        try:
            before, after = await migrate(self.url)
        except psycopg.OperationalError as exc:
            raise unavailable(exc) from exc
        return [{"database": redact(self.url), "from": before, "to": after}]

    def _read_agents(self) -> dict[str, int]:
        at = time.monotonic()
        rows = self._probe.rows("SELECT agent_id, ano FROM ss_agents ORDER BY agent_id")
        if rows is not None:
            self._agents = dict(rows)
            self.listing_seen(max(self._agents.values(), default=0), at)
        return self._agents

    def agent_ids(self) -> list[str]:
        return sorted(self._read_agents())

    def listing_seen(self, version: int, at: float) -> None:
        """A listing version read at `at` (time.monotonic, taken before the read began)."""
        self._listing = max(self._listing, version)
        self._listing_at = max(self._listing_at, at)

    def listing_version(self, *, fresh: bool = False) -> int:
        """The highest agent number (agents are only ever added): as a search or a probe read it
        at most LISTING_TTL_S ago, unless `fresh`."""
        at = time.monotonic()
        if fresh or at - self._listing_at >= LISTING_TTL_S:
            rows = self._probe.rows("SELECT coalesce(max(ano), 0) FROM ss_agents")
            if rows:
                self.listing_seen(rows[0][0], at)
        return max(self._listing, max(self._agents.values(), default=0))

    async def open_store(self, agent_id: str, *, create: bool = False) -> PgAgentStore:
        async def find(conn: psycopg.AsyncConnection) -> int | None:
            if create:
                await conn.execute("INSERT INTO ss_agents (agent_id, created_at) VALUES (%s, "
                                   "(extract(epoch FROM clock_timestamp()) * 1000)::bigint) ON CONFLICT DO NOTHING",
                                   (agent_id,))
            row = await (await conn.execute("SELECT ano FROM ss_agents WHERE agent_id = %s", (agent_id,))).fetchone()
            return row[0] if row else None
        ano = await self.db.tx(find)
        if ano is None:
            raise NotFound(f"agent {agent_id!r} not found")
        self._agents[agent_id] = ano
        return PgAgentStore(self.db, agent_id, ano, listing_seen=self.listing_seen,
                            reconcile_slots=self.settings.reconcile_slots)

    def query_features(self, match: Match) -> QueryFeatures:
        return query_features(match)

    async def search_top_each(self, stores: Sequence[AgentStore[Any]], match: Match,
                              scopes: Sequence[tuple[list[int] | None, list[int]]], *, deadline: float, k: int,
                              order: str, role: str | None, hot: str | None, since: int | None,
                              until: int | None) -> list[TopHits]:
        """Each store's own statement in turn (features: the search plan sends each agent's as a
        task of its own instead, a few at once)."""
        tops = []
        for store, (include, exclude) in zip(stores, scopes, strict=True):
            async with store.reader(deadline) as reader:
                top = await store.search_top(reader, match, k=k, order=order, include=include, exclude=exclude,
                                             role=role, hot=hot, since=since, until=until)
            assert top is not None  # None only where `ties` is False
            tops.append(top)
        return tops

    async def search_top_many(self, stores: Sequence[AgentStore[Any]], match: Match, *, k: int, order: str,
                              exclude: list[int], role: str | None, since: int | None, until: int | None,
                              deadline: float, sparse: bool = False) -> list[TopHits | None]:
        """One statement for every store (search_many.py); a query it does not fit
        (query_features) searches each store by itself, cut to the top `k` of them all."""
        pg = [cast(PgAgentStore, store) for store in stores]
        match = match.cut(cached_docs(match, [s.dfs for s in pg]))  # an any-word query: its rarest words
        q = Query(match)
        if not q.lexemes or is_wide(q):  # nothing to match, or many words (wide.py): each store's own search
            tops = await self.search_top_each(stores, match, [(None, exclude)] * len(stores), deadline=deadline,
                                              k=k, order=order, role=role, hot=None, since=since, until=until)
            return list(top_of_all(tops, k, order))
        at = time.monotonic()
        async with self.db.reader(deadline) as reader:
            found = await search_many(reader, [s.ano for s in pg], [s.dfs for s in pg], q, k=k, order=order,
                                      exclude=exclude, role=role, since=since, until=until, sparse=sparse)
        self.listing_seen(max(s.dfs.listing for s in pg), at)
        return [None if agent is None else
                TopHits(agent[0], agent[1], [RowHit(h[0], h[1], h[2], h[3], read_text(h[4])) for h in agent[2]])
                for agent in found]

    async def score_bounds(self, stores: Sequence[AgentStore[Any]], match: Match,
                           deadline: float) -> list[ScoreBound] | None:
        """Every store's bound in one statement (bounds.py; None while most were never folded); a
        query of no lexemes, or of many words (wide.py), has none (each unknown, as its Newest
        reads)."""
        pg = [cast(PgAgentStore, store) for store in stores]
        q = Query(match)
        if not pg:
            return []
        if not q.lexemes or is_wide(q):
            return [ScoreBound(n.meta_version, n.dirty, math.inf) for n in await self.newest(stores, deadline)]
        at = time.monotonic()
        async with self.db.reader(deadline) as reader:
            found = await score_bounds(reader, [s.ano for s in pg], [s.dfs for s in pg], q)
        self.listing_seen(max(s.dfs.listing for s in pg), at)
        return found

    def kept_bounds(self, stores: Sequence[AgentStore[Any]], match: Match) -> list[ScoreBound | None]:
        return [None] * len(stores)

    async def roster(self, stores: Sequence[AgentStore[Any]], query: RosterQuery, deadline: float
                     ) -> list[SessionMeta]:
        """One statement of every store's sessions (roster.py)."""
        anos = [cast(PgAgentStore, store).ano for store in stores]
        if not anos:
            return []
        async with self.db.reader(deadline) as reader:
            return await read_roster(reader, anos, query)

    async def roster_keys(self, stores: Sequence[AgentStore[Any]], query: RosterQuery, deadline: float
                          ) -> list[tuple[list[str], bool]]:
        """One statement of every store's sessions (roster.py)."""
        anos = [cast(PgAgentStore, store).ano for store in stores]
        if not anos:
            return []
        async with self.db.reader(deadline) as reader:
            found = await read_keys(reader, anos, query)
        return [found.get(ano, ([], False)) for ano in anos]

    async def newest(self, stores: Sequence[AgentStore[Any]], deadline: float) -> list[Newest]:
        """Every store's Newest in one statement (the listing's version with it, as a search's)."""
        anos = [cast(PgAgentStore, store).ano for store in stores]
        if not anos:
            return []
        at = time.monotonic()
        async with self.db.reader(deadline) as reader:
            found, listing = await read_newest(reader, anos)
        if listing is not None:
            self.listing_seen(listing, at)
        return found

    async def check_ready(self) -> None:
        """One statement on a connection of its own: the pool's may all be lent to searches, and a
        readiness check waiting behind them would call a busy but healthy database unavailable."""
        async with self._ready_lock:
            try:
                if self._ready_conn is None or self._ready_conn.closed:
                    self._ready_conn = await psycopg.AsyncConnection.connect(self.url, **connect_kwargs())
                await self._ready_conn.execute("SELECT 1 FROM ss_agents LIMIT 1")
            except BaseException as exc:  # cancelled mid-statement too: the connection's state is unknown
                if self._ready_conn is not None:
                    await self._ready_conn.close()
                    self._ready_conn = None
                if isinstance(exc, psycopg.Error):
                    raise unavailable(exc) from exc  # down, or the schema is missing
                raise

    def agent_status(self) -> Iterable[tuple[str, dict[str, int]]]:
        """Per agent: window and message counts, and its postings (postings.py: the common words'
        usable or stale, the rows written since the build), one short query (no event loop)."""
        rows = self._probe.rows(
            "SELECT a.agent_id, count(w.wid), coalesce(sum(w.needs_rebuild), 0), coalesce(sum(w.messages), 0), "
            "coalesce(sum(w.messages) FILTER (WHERE w.needs_rebuild = 0), 0), coalesce(sum(w.idx_rows), 0), "
            "b.old_rows, (SELECT count(*) FROM ss_postings p WHERE p.ano = a.ano AND p.kind = 0), "
            "(SELECT count(*) FROM ss_index f WHERE f.ano = a.ano AND f.iseq > b.mark), "
            "(SELECT count(*) FROM ss_windows x WHERE x.ano = a.ano AND x.needs_embed = 1 "
            f"AND {embeddable('x')}), (SELECT count(*) FROM ss_embeddings m WHERE m.ano = a.ano) "
            "FROM ss_agents a "
            "LEFT JOIN ss_windows w ON w.ano = a.ano LEFT JOIN ss_postings_built b ON b.ano = a.ano "
            "GROUP BY a.agent_id, a.ano, b.old_rows, b.mark ORDER BY a.agent_id")
        for (agent_id, windows, pending, messages, indexed, idx_rows, old_rows, words, fresh, embed_pending,
             embedded) in rows or []:
            usable = old_rows is not None and idx_rows - fresh == old_rows and fresh <= FRESH_LIMIT
            yield agent_id, {"windows": windows, "pending": int(pending), "messages": int(messages),
                             "indexed_messages": int(indexed), "postings_usable": words if usable else 0,
                             "postings_stale": 0 if usable else words, "index_log_rows": fresh or 0,
                             "embedded": embedded, "embed_pending": int(embed_pending)}


__all__ = ["CONNECT_TIMEOUT_S", "PgBackend"]
