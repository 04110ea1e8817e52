"""`scope`: the session list's filters, as one closed object both `sessions.search` and `sessions.list`
take, so that a roster and a search over it select the same sessions.

`parse_scope` checks the wire object (the service's texts, the field at fault named). The filters
run in the store, as SQL over its sessions table (store/roster.py, `SessionScope.roster_query`):
`select` reads the sessions a scope selects, a page at a time or all of them, and keeps those the
caller may see (visibility first: a scope never widens what a requester sees) and that hold the two
Unicode rules SQL only narrows (`holds_text`). `SessionScope.selects` is the same rule over one
session's metadata held in memory (the catalog), for the measurements that compare the two
(bench/bench_scope.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from ..keys import agent_of, check_agent_id, check_session_key
from ..session_meta import KINDS
from ..store.base import AgentStore, ManySearch, Position, RosterQuery, SessionMeta
from ..store.roster import position
from ..text.unicode61 import tokens
from ..values import optional_text
from .titles import title_matches
from .visibility import Viewer

FIELDS = ("agentIds", "label", "search", "kinds", "excludeSubagents", "excludeCron", "excludeSystem", "group",
          "spawnedBy", "activeMinutes", "palette")
COMBINED = "scope cannot be combined with agentId or sessionKeys"
MINUTE_MS = 60_000


@dataclass(frozen=True, slots=True)
class SessionScope:
    """The filters given; None (or False) is a filter not given. All given must hold."""

    agent_ids: frozenset[str] | None = None
    label: str | None = None  # folded (casefold) for an equality ignoring case
    search: str | None = None
    kinds: frozenset[str] | None = None
    exclude_subagents: bool = False
    exclude_cron: bool = False
    exclude_system: bool = False
    group: str | None = None
    spawned_by: str | None = None
    active_minutes: int | None = None
    palette: bool = False

    @property
    def narrows(self) -> bool:
        """Whether a filter besides `agentIds` is given (else it selects every session of its agents)."""
        return (self.label is not None or self.search is not None or self.kinds is not None or self.exclude_subagents
                or self.exclude_cron or self.exclude_system or self.group is not None or self.spawned_by is not None
                or self.active_minutes is not None or self.palette)

    def roster_query(self, *, now_ms: int, spawned: frozenset[str] | None = None, title: str | None = None,
                     palette: bool = False, archived: bool = True, after: Position | None = None,
                     limit: int | None = None, keys_only: bool = False) -> RosterQuery:
        """The filters as the store runs them (store/roster.py). `spawned`: the spawn tree from the
        catalog, for a store that cannot follow it across agents; `title`: a title search given
        beside the scope (sessions.list's `search`), the scope's own taking its place in SQL (the
        caller checks both: holds_text); `palette`, `archived`: sessions.list's and search's own."""
        search = self.search if self.search is not None else title
        query = None if search is None else search.strip()
        excluded = (("subagent", self.exclude_subagents), ("cron", self.exclude_cron), ("system", self.exclude_system))
        return RosterQuery(
            label=self.label, title_words=None if query is None else tuple(tokens(query)), title_key=query,
            kinds=None if self.kinds is None else tuple(sorted(self.kinds)),
            not_kinds=tuple(kind for kind, on in excluded if on), group=self.group, spawned_by=self.spawned_by,
            spawned=spawned,
            active_since=None if self.active_minutes is None else now_ms - self.active_minutes * MINUTE_MS,
            palette=self.palette or palette, archived=archived, after=after, limit=limit, keys_only=keys_only)

    def holds_text(self, meta: SessionMeta) -> bool:
        """The two rules SQL only narrows (store/roster.py), exactly: `label` equal ignoring case
        (casefold) and the title search (titles.py)."""
        if self.label is not None and (meta.label or "").casefold() != self.label:
            return False
        return self.search is None or title_matches(self.search, meta)

    def agents(self, agent_ids: Iterable[str]) -> list[str]:
        """The agents of `agent_ids` the scope may select sessions of."""
        return [a for a in agent_ids if self.agent_ids is None or a in self.agent_ids]

    def selects(self, meta: SessionMeta, *, now_ms: int, spawned: frozenset[str] | None,
                in_palette: bool, updated_at: int | None = None) -> bool:
        """Whether the session holds every filter. `spawned`: the keys `spawned_by` spawned,
        transitively (`spawn_tree`); `in_palette`: CatalogView.in_palette of the session;
        `updated_at`: its last activity as read now (the store's `activity`), else the catalog's."""
        if self.agent_ids is not None and agent_of(meta.session_key) not in self.agent_ids:
            return False
        if self.label is not None and (meta.label or "").casefold() != self.label:
            return False
        kind = meta.kind
        if self.kinds is not None and kind not in self.kinds:
            return False
        if (self.exclude_subagents and kind == "subagent") or (self.exclude_cron and kind == "cron") or (
                self.exclude_system and kind == "system"):
            return False
        if self.group is not None and meta.group != self.group:
            return False
        if spawned is not None and meta.session_key not in spawned:
            return False
        if self.active_minutes is not None and (
                meta.updated_at if updated_at is None else updated_at) < now_ms - self.active_minutes * MINUTE_MS:
            return False
        if self.palette and not in_palette:
            return False
        return self.search is None or title_matches(self.search, meta)

    def spawned(self, sessions: Mapping[str, SessionMeta]) -> frozenset[str] | None:
        """The sessions `spawned_by` spawned, transitively (None: the filter is not given)."""
        return None if self.spawned_by is None else spawn_tree(self.spawned_by, sessions)


# rows a roster read asks for at least, when the caller's visibility may leave some out
ROSTER_CHUNK = 256


async def select(backend: ManySearch, stores: Sequence[AgentStore[Any]], scope: SessionScope, viewer: Viewer, *,
                 deadline: float = math.inf, title: str | None = None, palette: bool = False, archived: bool = True,
                 after: Position | None = None, limit: int | None = None,
                 keys_only: bool = False) -> tuple[list[SessionMeta], bool]:
    """The sessions of `stores` that `scope` selects and `viewer` may see, read now from the stores
    (their `updatedAt` too), newest activity first: after `after`, at most `limit` of them, and
    whether more remain (None: every one). `title`: sessions.list's own title search, beside the
    scope's. A page the viewer thins out reads on until it is full or the roster ends.
    `keys_only`: the sessions' keys (and titles), in no order (RosterQuery.keys_only)."""
    spawned = spawned_for(backend, scope, viewer)
    now_ms = int(time.time() * 1000)
    found: list[SessionMeta] = []
    while True:
        want = None if limit is None else max(limit + 1 - len(found), ROSTER_CHUNK if viewer.requester else 0)
        rows = read = await backend.roster(stores, scope.roster_query(
            now_ms=now_ms, spawned=spawned, title=title, palette=palette, archived=archived, after=after,
            limit=want, keys_only=keys_only), deadline)
        if viewer.requester is not None:  # an operator sees every session but incognito ones, which SQL left out
            rows = [meta for meta in rows if viewer.can_see(meta.session_key)]
        if scope.label is not None or scope.search is not None or title is not None:
            rows = [meta for meta in rows
                    if scope.holds_text(meta) and (title is None or title_matches(title, meta))]
        found += rows
        if want is None or len(read) < want or len(found) > (limit or 0):
            break
        after = position(read[-1])
    if limit is None:
        return found, False
    return found[:limit], len(found) > limit


def spawned_for(backend: ManySearch, scope: SessionScope, viewer: Viewer) -> frozenset[str] | None:
    """RosterQuery.spawned: a database per agent cannot follow a spawn tree across agents, so on
    such a backend the tree is the catalog's (visibility's own); one database follows it in SQL."""
    if scope.spawned_by is None or backend.features.many_in_one_statement:
        return None
    return spawn_tree(scope.spawned_by, viewer.catalog.sessions)


def spawn_tree(root: str, sessions: Mapping[str, SessionMeta]) -> frozenset[str]:
    """Every session spawned by `root`, by the sessions it spawned, and so on (never `root` itself)."""
    children: dict[str, list[str]] = {}
    for key, meta in sessions.items():
        if meta.spawned_by is not None:
            children.setdefault(meta.spawned_by, []).append(key)
    found: set[str] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found and child != root:  # a loop in the metadata ends the walk
                found.add(child)
                todo.append(child)
    return frozenset(found)


def _flag(value: Any, field: str) -> bool:
    if value is not None and not isinstance(value, bool):
        raise InvalidRequest(f"{field} must be a boolean", field=field)
    return bool(value)


def _list(value: Any, field: str) -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidRequest(f"{field} must be a list", field=field)
    return value


def parse_scope(value: Any) -> SessionScope | None:
    """The wire's `scope` object as the filter it is; InvalidRequest naming the field at fault."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest("scope must be an object", field="scope")
    for name in value:
        if name not in FIELDS:
            raise InvalidRequest(f"scope has unknown field {name!r}", field=f"scope.{name}")
    agents = _list(value.get("agentIds"), "scope.agentIds")
    kinds = _list(value.get("kinds"), "scope.kinds")
    for kind in kinds or ():
        if kind not in KINDS:
            raise InvalidRequest(f"scope.kinds has unknown kind {kind!r}", field="scope.kinds")
    minutes = value.get("activeMinutes")
    if minutes is not None:
        if isinstance(minutes, float) and minutes.is_integer():
            minutes = int(minutes)
        if isinstance(minutes, bool) or not isinstance(minutes, int) or minutes < 1:
            raise InvalidRequest("scope.activeMinutes must be a positive integer", field="scope.activeMinutes")
    spawned_by = value.get("spawnedBy")
    label = optional_text(value.get("label"), "scope.label")
    return SessionScope(
        agent_ids=None if agents is None else frozenset(
            check_agent_id(a, field=f"scope.agentIds[{i}]") for i, a in enumerate(agents)),
        label=None if label is None else label.casefold(),
        search=optional_text(value.get("search"), "scope.search"),
        kinds=None if kinds is None else frozenset(kinds),
        exclude_subagents=_flag(value.get("excludeSubagents"), "scope.excludeSubagents"),
        exclude_cron=_flag(value.get("excludeCron"), "scope.excludeCron"),
        exclude_system=_flag(value.get("excludeSystem"), "scope.excludeSystem"),
        group=optional_text(value.get("group"), "scope.group"),
        spawned_by=None if spawned_by is None else check_session_key(spawned_by, field="scope.spawnedBy"),
        active_minutes=minutes,
        palette=_flag(value.get("palette"), "scope.palette"))

