"""The SQLite shape: one database file per agent under `<data_dir>/agents/`, cold files beside."""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, cast

from ...errors import NotFound, Unavailable
from ...keys import AGENT_ID_RE
from ...limits import announce, derive
from ...settings import BY_NAME, Settings
from ..base import AgentStore, Match, Newest, QueryFeatures, RosterQuery, ScoreBound, SessionMeta, TopHits
from ..cut import top_of_all
from .bounds import bound_query
from .budget import OpenBudget
from .features import FEATURES, query_features
from .files import no_files, out_of_files
from .meaning import embeddable
from .migrate import LATEST, applied_version
from .roster import read_keys_each, read_rosters
from .search_many import newests, score_bounds, search_tops
from .store import SqliteAgentStore

MIN_FREE_BYTES = 1 << 20  # less free on the data dir's disk and /readyz says the disk is full


class SqliteBackend:
    """The agents of one data dir: lists them and opens their stores (a Backend, store/base.py)."""

    shared_database = False
    features = FEATURES

    def __init__(self, data_dir: Path, settings: Settings, *, rows_in_sql: bool = False) -> None:
        """`rows_in_sql`: reconciliation inserts index rows with one INSERT … SELECT (what a worker
        process uses; see SqliteWriter._diff)."""
        self.data_dir = Path(data_dir)
        self.settings = settings
        self.rows_in_sql = rows_in_sql
        self.folder = self.data_dir / "agents"
        # the open-file limit raised to the hard one, and the stores it leaves room for (limits.py)
        self.files = derive(settings.open_agents_max, settings.readers_per_agent,
                            explicit=settings.open_agents_max != BY_NAME["open_agents_max"].default)
        announce(self.files)
        self.budget = OpenBudget(self.files.room, cap=settings.open_agents_max)  # the stores open at once

    async def open(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.budget.enlist()

    async def close(self) -> None:
        self.budget.retire()

    def agent_ids(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        try:  # listing the folder takes a descriptor too: none left is a 503, as any open is
            return sorted(p.stem for p in self.folder.glob("*.db") if AGENT_ID_RE.fullmatch(p.stem))
        except OSError as exc:
            if out_of_files(exc):
                raise no_files(None, exc) from exc
            raise

    def listing_version(self, *, fresh: bool = False) -> int:
        """The agents folder's mtime: it moves when a database file appears or goes (always fresh)."""
        try:
            return os.stat(self.folder).st_mtime_ns
        except OSError:
            return 0

    async def open_store(self, agent_id: str, *, create: bool = False) -> SqliteAgentStore:
        path = self.folder / f"{agent_id}.db"
        if not create and not path.exists():
            raise NotFound(f"agent {agent_id!r} not found")
        s = self.settings
        return await SqliteAgentStore(path, agent_id, readers=s.readers_per_agent,
                                      mmap_bytes=s.reader_mmap_mb << 20,
                                      quiet_mmap_bytes=s.reader_quiet_mmap_mb << 20,
                                      rows_in_sql=self.rows_in_sql,
                                      cold_dir=self.data_dir / "cold" / agent_id, budget=self.budget).open()

    def query_features(self, match: Match) -> QueryFeatures:
        return query_features(match)

    async def search_top_each(self, stores: Sequence[AgentStore[Any]], match: Match,
                              scopes: Sequence[tuple[list[int] | None, list[int]]], *, deadline: float, k: int,
                              order: str, role: str | None, hot: str | None, since: int | None,
                              until: int | None) -> list[TopHits]:
        """Each store's search_top with its (include, exclude) scope: their statements on one thread
        a hop (search_tops), as many stores a hop as keeps the concurrent batches of one search
        within open_agents_max."""
        at_once = max(1, self.budget.most // max(1, self.settings.search_agents_concurrency))
        return await search_tops([cast(SqliteAgentStore, s) for s in stores], match, scopes, deadline=deadline,
                                 at_once=at_once, k=k, order=order, role=role, hot=hot, since=since, until=until)

    async def score_bounds(self, stores: Sequence[AgentStore[Any]], match: Match,
                           deadline: float) -> list[ScoreBound] | None:
        """The stores' bounds for the query (bounds.py), a hop as many stores as search_top_each's;
        a query with a phrase without tokens has none (each unknown, as its Newest reads)."""
        query = bound_query(match)
        if query is None:
            return [ScoreBound(n.meta_version, n.dirty, math.inf) for n in await self.newest(stores, deadline)]
        fanout = max(1, self.settings.search_agents_concurrency)
        return await score_bounds([cast(SqliteAgentStore, s) for s in stores], query, deadline=deadline,
                                  at_once=max(1, self.budget.most // fanout), threads=min(fanout, os.cpu_count() or 1))

    def kept_bounds(self, stores: Sequence[AgentStore[Any]], match: Match) -> list[ScoreBound | None]:
        """The stores' bounds kept for their files' stamps now (bounds.Known), read from none."""
        query = bound_query(match)
        if query is None:
            return [None] * len(stores)
        sqlite_stores = [cast(SqliteAgentStore, s) for s in stores]
        return [s.known_bound(query, s.stamp()) for s in sqlite_stores]

    async def search_top_many(self, stores: Sequence[AgentStore[Any]], match: Match, *, k: int, order: str,
                              exclude: list[int], role: str | None, since: int | None, until: int | None,
                              deadline: float, sparse: bool = False) -> list[TopHits | None]:
        """A database per agent: each store searched by itself (search_top_each), then cut to the
        top `k` of them all (features: the search plan sends such searches there instead)."""
        tops = await self.search_top_each(stores, match, [(None, exclude)] * len(stores), deadline=deadline, k=k,
                                          order=order, role=role, hot=None, since=since, until=until)
        return list(top_of_all(tops, k, order))

    async def roster(self, stores: Sequence[AgentStore[Any]], query: RosterQuery, deadline: float
                     ) -> list[SessionMeta]:
        """Each store's statement (a database per agent), a hop as many stores as search_top_each's,
        merged in the list's order (roster.py)."""
        at_once = max(1, self.budget.most // max(1, self.settings.search_agents_concurrency))
        return await read_rosters([cast(SqliteAgentStore, s) for s in stores], query, deadline=deadline,
                                  at_once=at_once)

    async def roster_keys(self, stores: Sequence[AgentStore[Any]], query: RosterQuery, deadline: float
                          ) -> list[tuple[list[str], bool]]:
        at_once = max(1, self.budget.most // max(1, self.settings.search_agents_concurrency))
        return await read_keys_each([cast(SqliteAgentStore, s) for s in stores], query, deadline=deadline,
                                    at_once=at_once)

    async def newest(self, stores: Sequence[AgentStore[Any]], deadline: float) -> list[Newest]:
        """Those whose files are unchanged answer without a read (newest.py), the others are read in
        hops as search_top_each's (search_many.newests)."""
        at_once = max(1, self.budget.most // max(1, self.settings.search_agents_concurrency))
        return await newests([cast(SqliteAgentStore, s) for s in stores], deadline=deadline, at_once=at_once)

    async def check_ready(self) -> None:
        if not self.folder.is_dir() or not os.access(self.folder, os.W_OK):
            raise Unavailable(f"data dir {self.data_dir} is not writable")
        free = _free_bytes(self.folder)
        if free < MIN_FREE_BYTES:  # searches still answer; appends would not be stored
            raise Unavailable(f"database or disk is full: the data dir {self.data_dir} has {free} bytes free, "
                              "and writes fail until space is freed")

    def describe(self) -> str:
        return f"SQLite files in {self.folder}"

    async def schema_version(self) -> dict[str, Any]:
        """The oldest schema version among the agent databases (each its own), read without migrating."""
        versions = {agent: applied_version(self.folder / f"{agent}.db") for agent in self.agent_ids()}
        return {"store": "sqlite", "database": self.describe(), "version": min(versions.values(), default=LATEST),
                "latest": LATEST, "databases": versions}

    async def migrate(self) -> list[dict[str, Any]]:
        """Bring every agent database under the data dir to the latest schema (each migration in its own
        transaction, as opening a store does); per database {"database", "from", "to"}."""
        done = []
        for agent in self.agent_ids():
            path = self.folder / f"{agent}.db"
            before = applied_version(path)
            store = await self.open_store(agent)
            await store.close()
            done.append({"database": str(path), "from": before, "to": applied_version(path)})
        return done

    def agent_status(self) -> Iterable[tuple[str, dict[str, int]]]:
        """Per agent database: window and message counts, read with a short-lived read-only connection."""
        for agent_id in self.agent_ids():
            path = self.folder / f"{agent_id}.db"
            try:
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
                try:
                    row = conn.execute(
                        "SELECT count(*), coalesce(sum(needs_rebuild), 0), coalesce(sum(messages), 0), "
                        "coalesce(sum(CASE WHEN needs_rebuild = 0 THEN messages ELSE 0 END), 0) FROM windows"
                    ).fetchone()
                    try:  # a database this version has not opened yet has no postings tables
                        hot = conn.execute("SELECT coalesce(sum(log_seq >= 0), 0), coalesce(sum(log_seq < 0), 0), "
                                           "(SELECT count(*) FROM index_log) FROM hot_words").fetchone()
                    except sqlite3.Error:
                        hot = (0, 0, 0)
                    try:  # likewise the meaning index (migration 15)
                        meaning = conn.execute("SELECT (SELECT count(*) FROM embeddings), (SELECT count(*) "
                                               f"FROM windows w WHERE needs_embed = 1 AND {embeddable('w')})"
                                               ).fetchone()
                    except sqlite3.Error:
                        meaning = (0, 0)
                finally:
                    conn.close()
            except sqlite3.Error:
                continue
            yield agent_id, {"windows": row[0], "pending": row[1], "messages": row[2], "indexed_messages": row[3],
                             "postings_usable": hot[0], "postings_stale": hot[1], "index_log_rows": hot[2],
                             "embedded": meaning[0], "embed_pending": meaning[1]}


def _free_bytes(folder: Path) -> int:
    """Bytes this process may still write on the disk holding `folder` (root may use the reserve)."""
    st = os.statvfs(folder)
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
