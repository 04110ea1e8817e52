"""Planning a search: the windows of each agent in scope (plan_scopes), and the path a keyword
query takes over them (plan_keyword), from what the backend declares it can do (store.base
Features and QueryFeatures). execute.py runs the plan."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..errors import Forbidden, NotFound
from ..keys import DEFAULT_AGENT, agent_of
from ..store.base import AgentStore, ManySearch, Match
from .catalog import CatalogView
from .query import SearchRequest
from .scope import select, spawned_for
from .visibility import Viewer


@dataclass
class Scope:
    """The windows of one agent a search may read."""

    agent_id: str
    include: list[int] | None  # None: every window not excluded
    exclude: list[int]
    wids: set[int]  # hot windows in scope (to intersect with the dirty ones)
    archived: int = 0


class Path(Enum):
    """How a keyword query reads the agents in scope."""

    EACH = "each"  # each agent's statement by itself, a few at once
    NEWEST_FIRST = "newest_first"  # by `recent`: newest agents first while they may hold a hit
    TOGETHER = "together"  # whole agents, one statement of them all (Features.many_in_one_statement)
    TOGETHER_BEST_FIRST = "together_best_first"  # that, only the agents whose bounds may hold a top hit
    BATCHED = "batched"  # a batch of agents' statements a hop (Features.batches_agents)


@dataclass(frozen=True, slots=True)
class KeywordPlan:
    path: Path
    # NEWEST_FIRST: whole agents, so past the first few the rest may be searched together
    # (`together`) or passed over by their bounds kept in memory (`kept`); BATCHED: best first
    # by the agents' score bounds (`bounds`)
    whole: bool = False
    together: bool = False
    kept: bool = False
    bounds: bool = False


def plan_keyword(backend: ManySearch, match: Match, order: str, todo: list[Scope], k: int, *,
                 by_newest: bool = True) -> KeywordPlan:
    """The path of a keyword query over the scopes holding windows (`todo`), wanting `k` hits;
    `by_newest` False: never newest first (a hybrid query's keyword part)."""
    if len(todo) <= 1:
        return KeywordPlan(Path.EACH)
    features = backend.features
    fits = backend.query_features(match)
    whole = all(scope.include is None for scope in todo)
    together = whole and fits.many_in_one_statement
    if order == "recent" and by_newest:
        return KeywordPlan(Path.NEWEST_FIRST, whole=whole, together=together, kept=features.bounds_in_memory)
    if together and not features.batches_agents and len(todo) > 2 * k and fits.score_bounds:
        # by relevance, the agents that may hold a top hit searched together, best first; fewer
        # agents are one search
        return KeywordPlan(Path.TOGETHER_BEST_FIRST, whole=True, together=True, bounds=True)
    if together:
        return KeywordPlan(Path.TOGETHER, whole=True, together=True)
    if features.batches_agents:
        return KeywordPlan(Path.BATCHED, whole=whole, bounds=order != "recent" and fits.score_bounds)
    return KeywordPlan(Path.EACH)


# a scope over more agents than this, on a database per agent (SQLite), is selected from the catalog in
# memory unless it needs the activity read now (activeMinutes): at 1,000 agents a statement per agent
# took 2x the filters in memory (bench/bench_scope.py, decisions.md 2026-12-08)
ROSTER_SQL_AGENTS = 64


@dataclass(frozen=True, slots=True)
class Selected:
    """The sessions of an agent a narrowing scope selects, as the store's SQL read them."""

    keys: list[str]
    others: bool = False  # `keys` are the sessions it does NOT select (the fewer), incognito ones among them
    visible: bool = False  # `keys` hold only sessions the viewer may see (search/scope.py select)
    # read now from the store (else from the catalog, which may lag): an agent where it selects
    # nothing is left out of the search, not checked for a newer catalog (check_empty_scopes read
    # a thousand agents' versions, 1.5 s, for a scope of one session)
    read_now: bool = True


async def scoped_sessions(req: SearchRequest, viewer: Viewer, view: CatalogView, backend: ManySearch,
                          stores: Callable[[Sequence[str]], Awaitable[Sequence[AgentStore[Any]]]],
                          deadline: float) -> dict[str, Selected] | None:
    """The sessions a narrowing `scope` selects, by agent, as the stores' SQL selects them now;
    None when the request has no such scope (every session of its agents, as the catalog holds
    them). Without a text rule to check exactly, each store answers the fewer side (roster_keys):
    a scope selecting 9,990 of 10,000 sessions hands over 10 keys."""
    scope = req.scope
    if scope is None or not scope.narrows:
        return None
    agents = [a for a in scope.agents(view.agent_ids) if viewer.may_target_agent(a)]
    opened = await stores(agents)
    if not backend.features.many_in_one_statement and len(agents) > ROSTER_SQL_AGENTS and (
            scope.active_minutes is None):
        # the catalog is as fresh as the stores' meta versions say (SQLite answers them from memory
        # while the files are unchanged): an agent it holds current, where nothing is selected, is left out
        newest = await backend.newest(opened, deadline)
        current = {agent for agent, n in zip(agents, newest, strict=True)
                   if n.meta_version == view.versions.get(agent)}
        return _from_catalog(req, viewer, view, agents, current)
    if scope.label is None and scope.search is None:
        query = scope.roster_query(now_ms=int(time.time() * 1000), spawned=spawned_for(backend, scope, viewer),
                                   palette=req.palette, keys_only=True)
        found = await backend.roster_keys(opened, query, deadline)
        return {agent: Selected(keys, others) for agent, (keys, others) in zip(agents, found, strict=True)}
    rows, _ = await select(backend, opened, scope, viewer, deadline=deadline, palette=req.palette, keys_only=True)
    by_agent: dict[str, list[str]] = {agent: [] for agent in agents}
    if len(agents) == 1:
        by_agent[agents[0]] = [meta.session_key for meta in rows]
    else:
        for meta in rows:
            key = meta.session_key  # a stored key: its agent without agent_of's checks (a thousand agents' keys)
            by_agent[key.split(":", 2)[1] if key.startswith("agent:") else DEFAULT_AGENT].append(key)
    return {agent: Selected(keys, visible=True) for agent, keys in by_agent.items()}


def _from_catalog(req: SearchRequest, viewer: Viewer, view: CatalogView, agents: list[str],
                  current: set[str] | frozenset[str] = frozenset()) -> dict[str, Selected]:
    """scoped_sessions from the catalog in memory (SessionScope.selects): on a database per agent,
    past ROSTER_SQL_AGENTS agents, a statement per agent costs more than the filters in memory.
    `current`: the agents whose catalog rows are as the store holds them now."""
    scope = req.scope
    assert scope is not None
    catalog = view.catalog
    spawned = scope.spawned(catalog.sessions)
    now_ms = int(time.time() * 1000)
    out: dict[str, Selected] = {}
    for agent in agents:
        keys = []
        for key in view.agents[agent].keys:
            meta = catalog.sessions.get(key)
            if meta is not None and viewer.can_see(key) and scope.selects(
                    meta, now_ms=now_ms, spawned=spawned, in_palette=view.in_palette(key)) and (
                    not req.palette or view.in_palette(key)):
                keys.append(key)
        out[agent] = Selected(keys, visible=True, read_now=agent in current)
    return out


def _left_out(agent_id: str, view: CatalogView, others: list[str], archived: int) -> Scope:
    """Every window of the agent but those of `others` and incognito ones (a viewer who sees all of it)."""
    agent_view = view.agents[agent_id]
    out = set(agent_view.incognito_hot)
    for key in others:
        secret = view.catalog.incognito(key)
        for win in agent_view.windows_by_key.get(key, ()):
            if win.cold:
                archived -= not secret
            else:
                out.add(win.wid)
    return Scope(agent_id, None, sorted(out), agent_view.visible_hot - out, archived)


def plan_scopes(req: SearchRequest, viewer: Viewer, view: CatalogView, agents: list[str],
                selected: dict[str, Selected] | None = None) -> dict[str, Scope]:
    """Per agent, the windows in scope, after visibility; raise Forbidden for denied explicit targets.
    `selected`: the sessions a narrowing scope selects (scoped_sessions)."""
    catalog = view.catalog
    if req.session_keys is not None:
        for key in req.session_keys:
            if catalog.incognito(key) or not viewer.can_see(key):
                raise Forbidden(f"session {key!r} is not visible to this requester")
        by_agent: dict[str, list[str]] = {}
        for key in req.session_keys:
            by_agent.setdefault(agent_of(key), []).append(key)
        if req.agent_id is not None:
            by_agent = {a: ks for a, ks in by_agent.items() if a == req.agent_id}
    elif req.scope is not None:
        # an agent of agentIds that does not exist, or that the requester may not see, selects nothing
        by_agent = {a: None for a in req.scope.agents(agents) if viewer.may_target_agent(a)}  # type: ignore[misc]
    else:
        if req.agent_id is not None:
            # visibility first: a missing agent the requester could not see anyway is denied as a hidden one is
            if not viewer.may_target_agent(req.agent_id):
                raise Forbidden(f"agent {req.agent_id!r} is not visible to this requester")
            if req.agent_id not in agents:
                raise NotFound(f"agent {req.agent_id!r} not found")
            targets = [req.agent_id]
        else:
            targets = agents
        by_agent = {a: None for a in targets}  # type: ignore[misc]
    scopes: dict[str, Scope] = {}
    present = set(agents)  # a list's `in` for each of a thousand agents was 25 ms a search
    for agent_id, keys in by_agent.items():
        if agent_id not in present:
            continue
        agent_view = view.agents[agent_id]
        chosen = None if selected is None else selected.get(agent_id, Selected([]))
        if chosen is not None and chosen.read_now and not chosen.keys and not chosen.others:
            continue
        walk = keys is not None or req.session_id is not None or req.palette or chosen is not None
        if chosen is not None and chosen.others and req.session_id is None and viewer.sees_all_of(agent_id):
            scopes[agent_id] = _left_out(agent_id, view, chosen.keys, agent_view.visible_cold)
            continue
        if not walk and viewer.sees_all_of(agent_id):
            # the common case: every window of the agent but incognito ones, no per-session walk
            scopes[agent_id] = Scope(agent_id, None, agent_view.incognito_hot, agent_view.visible_hot,
                                     agent_view.visible_cold)
            continue
        if chosen is None:
            candidates = keys if keys is not None else agent_view.keys
        elif chosen.others:
            left_out = set(chosen.keys)
            candidates = [key for key in agent_view.keys if key not in left_out]
        else:
            candidates = chosen.keys
        included: list[int] = []
        archived = 0
        # the palette ran in SQL; visibility too where select() read them (an operator's: incognito left out)
        checked = chosen is not None and (chosen.visible or viewer.requester is None)
        for key in candidates:
            if not checked and (not viewer.can_see(key) or (req.palette and not view.in_palette(key))):
                continue
            for win in agent_view.windows_by_key.get(key, ()):
                if req.session_id is not None and win.session_id != req.session_id:
                    continue
                if win.cold:
                    archived += 1
                else:
                    included.append(win.wid)
        hot = agent_view.hot_wids
        if len(included) * 2 <= len(hot):
            scope = Scope(agent_id, sorted(included), [], set(included), archived)
        else:
            inside = set(included)
            scope = Scope(agent_id, None, sorted(w for w in hot if w not in inside), inside, archived)
        scopes[agent_id] = scope  # kept when empty: the catalog may not know the target's windows yet
    return scopes
