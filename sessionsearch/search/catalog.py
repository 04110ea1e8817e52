"""The session catalog search scopes with: every agent's sessions and windows, read whole once per
process and then by the changes since (store meta versions), and what scoping derives from it."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..store.base import AgentStore, SessionMeta, WindowMeta
from .visibility import Catalog

# an agent's store, opened on first use; raises NotFound for an agent without one
StoreLookup = Callable[[str], Awaitable[AgentStore[Any]]]


class ListingVersion(Protocol):
    def __call__(self, *, fresh: bool = False) -> int:
        """Backend.listing_version."""


@dataclass
class AgentView:
    version: int
    keys: list[str]
    windows: dict[int, WindowMeta]
    windows_by_key: dict[str, list[WindowMeta]]
    hot_wids: list[int]
    incognito_hot: list[int]  # hot windows of incognito sessions: excluded from every search
    visible_hot: set[int]  # hot windows of the other sessions
    visible_cold: int  # cold windows of the other sessions (archivedTranscriptsExcluded)


@dataclass
class AgentRows:
    """One agent's sessions and windows as last read, kept up to date from the changes since."""

    version: int
    sessions: dict[str, SessionMeta]
    windows: dict[int, WindowMeta]

    def apply(self, version: int, sessions: list[SessionMeta], windows: list[WindowMeta],
              gone_keys: list[str], gone_wids: list[int]) -> None:
        for key in gone_keys:  # deletions first: a row that exists now (re-created) is authoritative
            self.sessions.pop(key, None)
        for wid in gone_wids:
            self.windows.pop(wid, None)
        self.sessions.update((m.session_key, m) for m in sessions)
        self.windows.update((w.wid, w) for w in windows)
        self.version = version

    def view(self) -> AgentView:
        secret = {k for k, m in self.sessions.items() if m.incognito}
        by_key: dict[str, list[WindowMeta]] = {}
        hot, hidden, visible, cold = [], [], set(), 0
        for wid in sorted(self.windows):
            win = self.windows[wid]
            by_key.setdefault(win.session_key, []).append(win)
            if win.cold:
                cold += win.session_key not in secret
            elif win.session_key in secret:
                hot.append(wid)
                hidden.append(wid)
            else:
                hot.append(wid)
                visible.add(wid)
        return AgentView(self.version, list(self.sessions), dict(self.windows), by_key, hot, hidden, visible, cold)


@dataclass
class CatalogView:
    """Session metadata of every agent at known meta versions, and what scoping derives from it."""

    agents: dict[str, AgentView] = field(default_factory=dict)
    catalog: Catalog = field(default_factory=lambda: Catalog({}))

    @property
    def agent_ids(self) -> list[str]:
        return sorted(self.agents)

    @property
    def versions(self) -> dict[str, int]:
        return {a: v.version for a, v in self.agents.items()}

    def in_palette(self, key: str) -> bool:
        """The Control UI palette leaves out ungrouped spawned sessions and subagent runs, and archived ones."""
        meta = self.catalog.sessions.get(key)
        if meta is None:
            return False
        if meta.archived_at is not None or meta.incognito:
            return False
        spawned = meta.spawned_by is not None or meta.kind == "subagent"
        return not spawned or bool(meta.group)


class CatalogCache:
    """The catalog as this process last read it, refreshed from each agent's store by changes."""

    def __init__(self, stores: Callable[[], Awaitable[Mapping[str, AgentStore[Any]]]], store: StoreLookup,
                 listing_version: ListingVersion) -> None:
        """`stores()` opens every agent's store and returns them by agent id; `store` looks one up;
        `listing_version()` changes when an agent's store appears (Backend.listing_version)."""
        self._stores = stores
        self._store = store
        self._listing_version = listing_version
        self._view: CatalogView | None = None
        self._lock = asyncio.Lock()
        self._raw: dict[str, AgentRows] = {}  # per agent: the catalog rows as last read
        self._derived: dict[str, AgentView] = {}  # per agent: its rows' AgentView
        # the agents whose rows the next view reads again (None: every agent's): reading a thousand
        # agents' changes is a thousand round trips, seconds, for the one a new session went to
        self._stale: set[str] | None = set()
        self._listing_seen = 0
        # the stores as `stores()` last gave them, until one opens or the listing moves: listing
        # the folder of 1,000 agents was 25 ms of a view's 30, and a view is read again each time
        # a session is created (10 a second: one in most searches of every agent)
        self._opened: Mapping[str, AgentStore[Any]] | None = None
        self._last: CatalogView | None = None  # the view last made, the next one's base

    def invalidate(self, agent_id: str | None = None) -> None:
        """Metadata changed here, of `agent_id` (None: of any agent): the next view reads the changes."""
        self._view = None
        if agent_id is None:
            self._stale = None
        elif self._stale is not None:
            self._stale.add(agent_id)

    def opened(self) -> None:
        """A store was opened: the next view lists it (its rows read if they never were)."""
        self._view = None
        self._opened = None

    def clear(self) -> None:
        """Forget everything read (the stores are closing)."""
        self._view = None
        self._opened = None
        self._last = None
        self._raw = {}
        self._derived = {}
        self._stale = set()

    def note_window(self, agent_id: str, key: str, session_id: str) -> None:
        """An append went to this window: invalidate unless the view holds it already."""
        view = self._view
        if view is None:
            return
        agent = view.agents.get(agent_id)
        if agent is None or not any(w.session_id == session_id for w in agent.windows_by_key.get(key, ())):
            self.invalidate(agent_id)

    def listing_moved(self, *, fresh: bool = False) -> bool:
        """Whether the agent listing moved since the view was read (an agent created elsewhere);
        `fresh`: as read now, not as a search read it a moment ago."""
        return self._listing_version(fresh=fresh) != self._listing_seen

    async def view_with(self, agents: Iterable[str], deadline: float = math.inf, *,
                        refresh: bool = False) -> CatalogView:
        """As `view`, the listing read afresh when the view lacks one of `agents` (another process
        may have just created it; the listing answers from memory a moment otherwise)."""
        view = await self.view(deadline, refresh=refresh)
        if any(a not in view.agents for a in agents):
            view = await self.view(deadline, fresh_listing=True)
        return view

    async def view(self, deadline: float = math.inf, *, refresh: bool = False,
                   fresh_listing: bool = False) -> CatalogView:
        """The session catalog as of the agents' current meta versions.

        Each agent's sessions and windows are read whole once; after that the view reads again only
        the agents invalidated since (every agent with `refresh`) and of them only the rows stamped
        after the version this process last read (and the deletions), and derives their scoping
        structures again in memory. An agent changed by another process is found stale by its meta
        version (MetaChanged) and invalidated by the caller.
        """
        async with self._lock:
            # another process may have created an agent's store
            listing = self._listing_version(fresh=fresh_listing)
            if self._view is not None and not refresh and listing == self._listing_seen:
                return self._view
            if listing != self._listing_seen or refresh:
                self._opened = None
            self._listing_seen = listing
            stale, self._stale = None if refresh else self._stale, set()
            try:
                if self._opened is None:
                    self._opened = dict(sorted((await self._stores()).items()))
                last = self._last
                if stale is None or last is None or last.agents.keys() != self._opened.keys():
                    view = await self._whole(self._opened, stale, deadline)
                else:
                    view = await self._changed(last, self._opened, stale, deadline)
            except BaseException:  # e.g. past the deadline: what was to be read still is
                self._stale = None if stale is None or self._stale is None else self._stale | stale
                raise
            self._last = view
            # kept unless an agent was invalidated while the others were read
            self._view = view if self._stale == set() else None
            return view

    async def _whole(self, opened: Mapping[str, AgentStore[Any]], stale: set[str] | None,
                     deadline: float) -> CatalogView:
        """The view of every agent, the stale ones (None: all) and the ones never read read now."""
        view = CatalogView()
        sessions: dict[str, SessionMeta] = {}
        for agent_id, store in opened.items():
            raw = self._raw.get(agent_id)
            if raw is None or stale is None or agent_id in stale:
                raw = await self._read(agent_id, store, raw, deadline)
                self._derived[agent_id] = raw.view()
            sessions.update(raw.sessions)
            view.agents[agent_id] = self._derived[agent_id]
        view.catalog = Catalog(sessions)
        return view

    async def _changed(self, last: CatalogView, opened: Mapping[str, AgentStore[Any]], stale: set[str],
                       deadline: float) -> CatalogView:
        """`last` with the stale agents read again (the same agents): a new session costs a read of
        its agent, not a pass over every agent's rows (a view read by a search is never changed)."""
        agents = dict(last.agents)
        sessions = dict(last.catalog.sessions)
        for agent_id in sorted(stale.intersection(opened)):
            raw = await self._read(agent_id, opened[agent_id], self._raw.get(agent_id), deadline)
            for key in last.agents[agent_id].keys:  # its sessions as `last` holds them, some maybe gone
                sessions.pop(key, None)
            sessions.update(raw.sessions)
            agents[agent_id] = self._derived[agent_id] = raw.view()
        return CatalogView(agents, Catalog(sessions))

    async def _read(self, agent_id: str, store: AgentStore[Any], raw: AgentRows | None, deadline: float) -> AgentRows:
        async with store.reader(deadline) as reader:
            version, whole, metas, windows, gone_keys, gone_wids = await store.meta_snapshot(
                reader, None if raw is None else raw.version)
        if raw is None or whole:
            raw = self._raw[agent_id] = AgentRows(version, {m.session_key: m for m in metas},
                                                  {w.wid: w for w in windows})
        else:
            raw.apply(version, metas, windows, gone_keys, gone_wids)
        return raw

    async def meta_version(self, agent_id: str, deadline: float = math.inf) -> int:
        """The agent's meta version as committed now (a view holding another one is stale)."""
        store = await self._store(agent_id)
        async with store.reader(deadline) as reader:
            return await store.meta_version(reader)
