"""`scope`: the session list's filters, as one closed object both `sessions.search` and `sessions.list`
take, so that a roster and a search over it select the same sessions.

Every rule is written once here: `parse_scope` checks the wire object (the service's texts, the
field at fault named), `SessionScope.selects` says whether one session's metadata holds every
filter. Visibility is applied before, by the caller (a scope never widens what a requester sees).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from ..keys import agent_of, check_agent_id, check_session_key
from ..session_meta import KINDS
from ..store.base import SessionMeta
from ..values import optional_text
from .titles import title_matches

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

