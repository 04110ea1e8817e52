"""Which sessions a requester may search and read (SPEC §6), decided before any limit."""

from __future__ import annotations

import re
from functools import lru_cache

from ..identity import Requester
from ..keys import agent_of, main_key
from ..settings import Settings
from ..store.base import SessionMeta


@lru_cache(maxsize=256)
def _pattern(entry: str) -> re.Pattern[str] | None:
    if "*" not in entry:
        return None
    return re.compile("^" + ".*".join(re.escape(part) for part in entry.split("*")) + "$", re.IGNORECASE)


def agent_allowed(agent_id: str, allow: tuple[str, ...]) -> bool:
    """`allow` entries with `*` match case-insensitively; exact ids match case-sensitively."""
    if not allow:
        return True
    for entry in allow:
        pattern = _pattern(entry)
        if (pattern.match(agent_id) if pattern else entry == agent_id):
            return True
    return False


class Catalog:
    """Session metadata of every agent, with the spawn tree across agents."""

    def __init__(self, sessions: dict[str, SessionMeta]) -> None:
        self.sessions = sessions
        self.children: dict[str, set[str]] = {}
        for meta in sessions.values():
            for parent in {meta.spawned_by, meta.parent_session_key}:
                if parent is None or parent == meta.session_key:
                    continue
                self.children.setdefault(parent, set()).add(meta.session_key)

    def descendants(self, key: str) -> set[str]:
        """Sessions `key` spawned or parents, transitively."""
        out: set[str] = set()
        stack = [key]
        while stack:
            for child in self.children.get(stack.pop(), ()):
                if child not in out:
                    out.add(child)
                    stack.append(child)
        return out

    def incognito(self, key: str) -> bool:
        meta = self.sessions.get(key)
        return bool(meta and meta.incognito)


class Viewer:
    """The visibility decision for one requester (None: an operator, who sees all but incognito)."""

    def __init__(self, settings: Settings, requester: Requester | None, catalog: Catalog) -> None:
        self.requester = requester
        self.catalog = catalog
        self.visibility = settings.visibility
        self.a2a = settings.agent_to_agent_enabled
        self.allow = settings.agent_to_agent_allow
        self.spawned_only = bool(requester and requester.sandboxed
                                 and settings.sandbox_session_tools_visibility == "spawned")
        if requester is not None:
            self.own_key = requester.session_key
            self.own_agent = agent_of(requester.session_key)
            self.spawned = catalog.descendants(requester.session_key)

    def can_see_agent(self, agent_id: str) -> bool:
        """Whether any ordinary (not spawned-by-requester) session of the agent may be visible."""
        if self.requester is None:
            return True
        if self.spawned_only or self.visibility in ("self", "tree"):
            return agent_id == self.own_agent
        if agent_id == self.own_agent:
            return True
        return self.visibility == "all" and self._cross_agent(agent_id)

    def may_target_agent(self, agent_id: str) -> bool:
        """Whether `agentId` may name the agent: an agent it cannot see as such is still open when a
        session it spawned there is visible to it. Only visible ones count, so that a denial never
        tells whether a hidden (incognito, or out of this visibility) spawned session is there."""
        return self.can_see_agent(agent_id) or (self.requester is not None and any(
            agent_of(key) == agent_id and self.can_see(key) for key in self.spawned))

    def _cross_agent(self, agent_id: str) -> bool:
        return self.a2a and agent_allowed(self.own_agent, self.allow) and agent_allowed(agent_id, self.allow)

    def sees_all_of(self, agent_id: str) -> bool:
        """Whether every non-incognito session of the agent is visible (no per-session check needed)."""
        if self.requester is None:
            return True
        if self.spawned_only or self.visibility == "self":
            return False
        if self.visibility == "tree":
            return self.own_key == main_key(self.own_agent) and agent_id == self.own_agent
        if agent_id == self.own_agent:
            return True
        return self.visibility == "all" and self._cross_agent(agent_id)

    def can_see(self, key: str) -> bool:
        if self.catalog.incognito(key):
            return False
        if self.requester is None or key == self.own_key:
            return True
        if self.spawned_only and key not in self.spawned:
            return False  # the sandbox narrows what the visibility below gives; it never widens it
        agent = agent_of(key)
        if self.visibility == "self":
            return False
        if self.visibility == "tree":
            return key in self.spawned or (self.own_key == main_key(self.own_agent) and agent == self.own_agent)
        if self.visibility == "agent":
            return agent == self.own_agent
        return agent == self.own_agent or key in self.spawned or self._cross_agent(agent)
