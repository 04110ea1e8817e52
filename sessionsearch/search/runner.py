"""Running a search: scope, one time-budgeted FTS statement per agent, merge, snippets, budgets.

`recent` over many agents visits them newest first and stops once the hits in hand settle the
answer (newest_first)."""

from __future__ import annotations

import heapq
import json
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar, cast

import structlog

from ..errors import Forbidden, NotFound
from ..keys import agent_of
from ..settings import Settings
from ..store.base import Match, ScoreBound, TopHits
from ..store.rowids import wid_of
from .catalog import BoundsLookup, CatalogCache, CatalogView, EachTop, KeptBounds, ManyTop, NewestLookup, StoreLookup
from .meaning import Meaning, run_meaning
from .query import ParsedQuery, SearchRequest
from .text import fold, redact, snippet
from .visibility import Viewer
from .visits import MetaChanged, best_first, bounded

log = structlog.get_logger("sessionsearch.search")

INDEXING_WARNING = "Transcript indexing is in progress; results may be incomplete. Retry sessions_search shortly."

# enqueue(dirty windows by agent) -> whether the queue was reached
Enqueue = Callable[[dict[str, set[int]]], Awaitable[bool]]

A = TypeVar("A")


BATCH = 50  # agents whose statements one hop of EachTop runs (run_query)
# agents newest_first searches one by one before it hands the rest to `rest`: about one round of
# the fanout (on PostgreSQL 32 alone were 8 rounds of statements, ~70 ms, before a word few agents
# hold reached the one statement of them all, which costs ~20)
VISITS_ALONE = 4


async def newest_first(each: Callable[[Scope], Awaitable[A]], scopes: list[Scope], *, newest: NewestLookup,
                       versions: dict[str, int] | None, deadline: float, k: int, fanout: int,
                       times: Callable[[A], Iterable[int]], passed: Callable[[Scope, set[int]], A],
                       rest: Callable[[list[Scope]], Awaitable[list[A | None] | None]] | None = None,
                       since: int | None = None, until: int | None = None,
                       matchless: Callable[[list[Scope]], Awaitable[set[str]]] | None = None) -> list[A]:
    """`each` of the scopes for order "recent", the agents visited newest first (at most `fanout`
    at once), none started once `k` items (`times`: the timestamps of an answer's items) are
    newer than the newest message of every agent not visited yet; `passed(scope, dirty)` answers
    for an agent not visited (nothing, its windows in scope needing reconciliation). Past
    VISITS_ALONE agents, the agents `matchless` names (known to hold no match) are passed over, and
    `rest` answers for all the others at once (None: it cannot; None for an agent: it holds no hit
    among them, passed as an agent not visited). The time
    range [`since`, `until`) bounds the hits too: an agent with no message since `since` is
    passed over at once.

    Exact: an agent passed over holds no message newer than its Newest bound, which is below the
    k-th newest timestamp in hand, so none of its hits would rank among the first k (a hit as new
    as the k-th could, by messageId: the bound must be beaten, not met). Raises MetaChanged for an
    agent whose metadata moved, visited or not.
    """
    known = await newest([s.agent_id for s in scopes], deadline)
    for scope in scopes:
        if versions is not None and known[scope.agent_id].meta_version != versions.get(scope.agent_id):
            raise MetaChanged(scope.agent_id)
    bounds: dict[str, int | None] = {}  # the newest timestamp a hit of the agent may have
    for scope in scopes:
        bound = known[scope.agent_id].ts_max
        if bound is not None and until is not None:
            bound = min(bound, until - 1)
        # an agent without a clean message (in the range) has no hit: passed over at once
        bounds[scope.agent_id] = None if bound is None or (since is not None and bound < since) else bound
    floor = -(1 << 63)
    ordered = sorted(scopes, key=lambda s: -(bounds[s.agent_id] or floor))
    newest_k: list[int] = []  # min-heap of the k newest timestamps in hand

    def settled(scope: Scope) -> bool:
        bound = bounds[scope.agent_id]
        return bound is None or (len(newest_k) >= k and newest_k[0] > bound)

    async def visit(scope: Scope) -> A:
        if settled(scope):
            return passed(scope, scope.wids.intersection(known[scope.agent_id].dirty))
        answer = await each(scope)
        for ts in times(answer):
            if len(newest_k) < k:
                heapq.heappush(newest_k, ts)
            elif ts > newest_k[0]:
                heapq.heapreplace(newest_k, ts)
        return answer

    alone, others = (ordered[:VISITS_ALONE], ordered[VISITS_ALONE:]) if rest is not None else (ordered, [])
    answers = await bounded(visit, alone, fanout)
    if matchless is not None and others and not settled(others[0]):
        for agent_id in await matchless(others):
            bounds[agent_id] = None
    if rest is not None and others and not settled(others[0]):
        together = await rest([s for s in others if bounds[s.agent_id] is not None])
        if together is not None:
            found = iter(together)
            return answers + [passed(s, s.wids.intersection(known[s.agent_id].dirty))
                              if bounds[s.agent_id] is None or (answer := next(found)) is None else answer
                              for s in others]
    return answers + await bounded(visit, others, fanout)


@dataclass
class Scope:
    """The windows of one agent a search may read."""

    agent_id: str
    include: list[int] | None  # None: every window not excluded
    exclude: list[int]
    wids: set[int]  # hot windows in scope (to intersect with the dirty ones)
    archived: int = 0


@dataclass
class Hit:
    agent_id: str
    rid: int
    rank: float  # bm25: lower is better
    message_id: str
    ts: int
    text: str
    matched_by: tuple[str, ...] = ()  # semantic and hybrid modes: how the hit was found
    snippet: str | None = None  # semantic and hybrid modes: the passage nearest the query

    def sort_key(self, order: str) -> tuple[Any, ...]:
        if order == "recent":
            return (-self.ts, self.message_id)
        return (self.rank, -self.ts, self.message_id)


@dataclass
class SessionGroup:
    """A session's hits in scope (resultMode "sessions"): how many, and the best."""

    agent_id: str
    session_key: str
    hits: int
    best: Hit

    def sort_key(self, order: str) -> tuple[Any, ...]:
        return (*self.best.sort_key(order), self.session_key)


@dataclass
class Outcome:
    hits: list[Hit] = field(default_factory=list)
    more: bool = False
    dirty: dict[str, set[int]] = field(default_factory=dict)
    groups: list[SessionGroup] = field(default_factory=list)  # resultMode "sessions"
    pending: dict[str, set[int]] = field(default_factory=dict)  # windows waiting for embeddings
    meaning_failed: bool = False  # the query could not be embedded


def plan_scopes(req: SearchRequest, viewer: Viewer, view: CatalogView, agents: list[str]) -> dict[str, Scope]:
    """Per agent, the windows in scope, after visibility; raise Forbidden for denied explicit targets."""
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
        if keys is None and req.session_id is None and not req.palette and viewer.sees_all_of(agent_id):
            # the common case: every window of the agent but incognito ones, no per-session walk
            scopes[agent_id] = Scope(agent_id, None, agent_view.incognito_hot, agent_view.visible_hot,
                                     agent_view.visible_cold)
            continue
        candidates = keys if keys is not None else agent_view.keys
        included: list[int] = []
        archived = 0
        for key in candidates:
            if not viewer.can_see(key) or (req.palette and not view.in_palette(key)):
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
            chosen = set(included)
            scope = Scope(agent_id, None, sorted(w for w in hot if w not in chosen), chosen, archived)
        scopes[agent_id] = scope  # kept when empty: the catalog may not know the target's windows yet
    return scopes


async def run_query(open_store: StoreLookup, catalog: CatalogCache, query: ParsedQuery, req: SearchRequest,
                    scopes: dict[str, Scope], versions: dict[str, int] | None, deadline: float,
                    fanout: int = 4, newest: NewestLookup | None = None, many: ManyTop | None = None,
                    each_top: EachTop | None = None, bounds: BoundsLookup | None = None,
                    kept: KeptBounds | None = None) -> Outcome:
    """Top hits of one query over the scopes, at most `fanout` agents' statements at once (by
    `recent`, newest agents first while they may hold a hit: newest_first; by relevance over
    whole agents, one search of them all where the backend has one: `many`); raises MetaChanged
    when scoping went stale.

    `versions` None answers from the given scopes whatever the metadata now says. `each_top`: the
    agents searched one by one go BATCH at a time to it (at most `fanout` batches at once), by
    relevance best first by their `bounds` where the backend keeps them (visits.best_first); by
    `recent`, the agents whose `kept` bounds (no read) say they match nothing are not visited.
    """
    out = Outcome()
    if query.match is None:
        return out
    k = req.limit + 1
    await check_empty_scopes(catalog, scopes, versions, deadline)
    todo = [scope for scope in scopes.values() if scope.wids]

    async def each(scope: Scope) -> tuple[str, list[Hit], bool, set[int]]:
        return await _agent_top(open_store, scope, query, req, k, versions, deadline)

    per_agent: list[tuple[str, list[Hit], bool, set[int]]] | None = None
    whole = many is not None and len(todo) > 1 and all(scope.include is None for scope in todo)

    async def together(scopes: list[Scope], sparse: bool = False
                       ) -> list[tuple[str, list[Hit], bool, set[int]] | None] | None:
        """The scopes' hits among the top k of them all, in one search (Backend.search_top_many);
        None where the backend has none, and (`sparse`) for an agent left unread. The cut in
        run_query decides `more`."""
        assert many is not None and query.match is not None
        exclude = sorted({wid for scope in scopes for wid in scope.exclude})
        tops = await many([scope.agent_id for scope in scopes], query.match, k=k, order=req.order, exclude=exclude,
                          role=req.role, since=req.since, until=req.until, deadline=deadline, sparse=sparse)
        if tops is None:
            return None
        found: list[tuple[str, list[Hit], bool, set[int]] | None] = []
        for scope, top in zip(scopes, tops, strict=True):
            if top is None:
                found.append(None)
                continue
            agent_id, hits, _, dirty = _hits_of(scope, top, versions, k)
            found.append((agent_id, hits, False, dirty))
        return found

    async def every(scopes: list[Scope]) -> list[tuple[str, list[Hit], bool, set[int]]] | None:
        """`together`, every agent read."""
        found = await together(scopes)
        if found is None:
            return None
        assert all(agent is not None for agent in found)  # only a sparse search leaves one out
        return cast(list[tuple[str, list[Hit], bool, set[int]]], found)

    async def matchless(scopes: list[Scope]) -> set[str]:
        """The agents whose bounds kept in memory say they hold no match (no read)."""
        assert kept is not None and query.match is not None
        found = await kept([s.agent_id for s in scopes], query.match)
        return {s.agent_id for s, bound in zip(scopes, found, strict=True)
                if bound is not None and bound.bound == -math.inf}

    def found_ranks(found: tuple[str, list[Hit], bool, set[int]]) -> Iterable[float]:
        return (h.rank for h in found[1])

    def passed_over(scope: Scope, bound: ScoreBound) -> tuple[str, list[Hit], bool, set[int]]:
        return scope.agent_id, [], False, scope.wids.intersection(bound.dirty)

    async def relevance_bounds() -> list[ScoreBound] | None:
        """The agents' score bounds (Backend.score_bounds), None where the backend keeps none."""
        if bounds is None or query.match is None:
            return None
        known = await bounds([s.agent_id for s in todo], query.match, deadline)
        for scope, bound in zip(todo, known, strict=True) if known is not None else ():
            if versions is not None and bound.meta_version != versions.get(scope.agent_id):
                raise MetaChanged(scope.agent_id)
        return known

    known: list[ScoreBound] | None = None
    if req.order == "recent" and newest is not None and len(todo) > 1:
        per_agent = await newest_first(each, todo, newest=newest, versions=versions, deadline=deadline, k=k,
                                       fanout=fanout, times=lambda found: (h.ts for h in found[1]),
                                       passed=lambda scope, dirty: (scope.agent_id, [], False, dirty),
                                       # newest_first has read every agent's Newest: a sparse search
                                       rest=partial(together, sparse=True) if whole else None,
                                       since=req.since, until=req.until,
                                       matchless=matchless if kept is not None else None)
    elif whole and each_top is None and len(todo) > 2 * k and (known := await relevance_bounds()) is not None:
        # by relevance, the agents that may hold a top hit searched together, best first, k in the
        # first hop (an agent may hold one hit); fewer agents are one search
        async def hop(scopes: list[Scope]) -> list[tuple[str, list[Hit], bool, set[int]]]:
            found = await every(scopes)
            assert found is not None  # the backend searched them all together before
            return found

        per_agent = await best_first(hop, todo, known, k=k, batch=len(todo), fanout=1, first=k, ranks=found_ranks,
                                     passed=passed_over)
    elif whole:
        per_agent = await every(todo)
    if per_agent is None and each_top is not None and len(todo) > 1:
        async def batch(scopes: list[Scope]) -> list[tuple[str, list[Hit], bool, set[int]]]:
            assert each_top is not None and query.match is not None
            tops = await each_top([s.agent_id for s in scopes], query.match, [(s.include, s.exclude) for s in scopes],
                                  k=k, order=req.order, role=req.role, hot=query.hot_token, since=req.since,
                                  until=req.until, deadline=deadline)
            return [_hits_of(scope, top, versions, k) for scope, top in zip(scopes, tops, strict=True)]

        if req.order != "recent":
            known = await relevance_bounds()
        if known is not None:  # by relevance, best first while an agent left may hold a top hit
            per_agent = await best_first(batch, todo, known, k=k, batch=BATCH, fanout=fanout, ranks=found_ranks,
                                         passed=passed_over)
        else:
            batches = await bounded(batch, [todo[i:i + BATCH] for i in range(0, len(todo), BATCH)], fanout)
            per_agent = [found for answers in batches for found in answers]
    if per_agent is None:
        per_agent = await bounded(each, todo, fanout)
    for agent_id, hits, more, dirty in per_agent:
        out.hits += hits
        out.more |= more
        if dirty:
            out.dirty[agent_id] = dirty
    out.hits.sort(key=lambda h: h.sort_key(req.order))
    if len(out.hits) > req.limit:
        out.more = True
        out.hits = out.hits[:req.limit]
    return out


async def check_empty_scopes(catalog: CatalogCache, scopes: dict[str, Scope], versions: dict[str, int] | None,
                             deadline: float) -> None:
    """A scope this view holds empty is checked before it answers nothing (MetaChanged if stale)."""
    if versions is not None:
        for scope in scopes.values():
            if not scope.wids and await catalog.meta_version(scope.agent_id, deadline) != versions.get(scope.agent_id):
                raise MetaChanged(scope.agent_id)


async def _agent_top(open_store: StoreLookup, scope: Scope, query: ParsedQuery, req: SearchRequest, k: int,
                     versions: dict[str, int] | None, deadline: float) -> tuple[str, list[Hit], bool, set[int]]:
    store = await open_store(scope.agent_id)
    assert query.match is not None  # run_query answers a query without words itself
    async with store.reader(deadline) as reader:
        top = await store.search_top(
            reader, query.match, k=k, order=req.order, include=scope.include, exclude=scope.exclude, role=req.role,
            hot=query.hot_token, since=req.since, until=req.until)
    assert top is not None  # None only where `ties` is False
    return _hits_of(scope, top, versions, k)


def _hits_of(scope: Scope, top: TopHits, versions: dict[str, int] | None, k: int
             ) -> tuple[str, list[Hit], bool, set[int]]:
    """An agent's hits in scope, whether it had `k` or more, and its dirty windows in scope;
    MetaChanged when its meta version is not the view's."""
    version, dirty, rows = top
    if versions is not None and version != versions.get(scope.agent_id):
        raise MetaChanged(scope.agent_id)
    # a row of a window no longer in the catalog (an orphan awaiting the sweep) is never a hit
    hits = [Hit(scope.agent_id, r.row_id, r.score, r.message_id, r.ts, r.text)
            for r in rows if wid_of(r.row_id) in scope.wids]
    return scope.agent_id, hits, len(rows) >= k, scope.wids.intersection(dirty)


async def run_sessions_query(open_store: StoreLookup, catalog: CatalogCache, query: ParsedQuery, req: SearchRequest,
                             scopes: dict[str, Scope], view: CatalogView, versions: dict[str, int] | None,
                             deadline: float, fanout: int = 4, newest: NewestLookup | None = None) -> Outcome:
    """resultMode "sessions": the sessions in the order of their best hits, each with its hits in
    scope counted; raises MetaChanged as run_query does.

    Per agent, in one snapshot: messages mode's top hits (postings as it would use them), which
    settle the sessions when they hold enough of them; else one statement ranking every match's
    session (store/sqlite/sessions.py).
    """
    out = Outcome()
    if query.match is None:
        return out
    await check_empty_scopes(catalog, scopes, versions, deadline)
    found = await _sessions_top(open_store, query.match, req, scopes, versions, deadline, query.hot_token, fanout,
                                newest)
    for agent_id, _, dirty in found:
        if dirty:
            out.dirty[agent_id] = dirty
    groups = sorted((g for _, agent_groups, _ in found for g in agent_groups), key=lambda g: g.sort_key(req.order))
    out.more = len(groups) > req.limit
    out.groups = groups[:req.limit]
    return out


async def _sessions_top(open_store: StoreLookup, match: Match, req: SearchRequest,
                        scopes: dict[str, Scope], versions: dict[str, int] | None, deadline: float,
                        hot: str | None = None, fanout: int = 4, newest: NewestLookup | None = None
                        ) -> list[tuple[str, list[SessionGroup], set[int]]]:
    """Per agent in scope: its top `limit + 1` sessions and the dirty windows in scope (at most
    `fanout` agents' statements at once; by `recent`, newest_first's agents)."""
    async def agent(scope: Scope) -> tuple[str, list[SessionGroup], set[int]]:
        store = await open_store(scope.agent_id)
        async with store.reader(deadline) as reader:
            version, dirty, rows = await store.search_sessions(
                reader, match, k=req.limit + 1, order=req.order, include=scope.include,
                exclude=scope.exclude, role=req.role, since=req.since, until=req.until, hot=hot)
        if versions is not None and version != versions.get(scope.agent_id):
            raise MetaChanged(scope.agent_id)
        # a best hit in a window no longer in the catalog (an orphan awaiting the sweep) shows nothing
        groups = [SessionGroup(scope.agent_id, key, hits, Hit(scope.agent_id, *best))
                  for key, hits, best in rows if wid_of(best[0]) in scope.wids]
        return scope.agent_id, groups, scope.wids.intersection(dirty)

    todo = [scope for scope in scopes.values() if scope.wids]
    if req.order == "recent" and newest is not None and len(todo) > 1:
        # a session's place is its best hit's: its newest, no newer than its agent's bound
        return await newest_first(agent, todo, newest=newest, versions=versions, deadline=deadline,
                                  k=req.limit + 1, fanout=fanout, times=lambda found: (g.best.ts for g in found[1]),
                                  passed=lambda scope, dirty: (scope.agent_id, [], dirty), since=req.since,
                                  until=req.until)
    return await bounded(agent, todo, fanout)


def render_sessions(settings: Settings, outcome: Outcome, query: ParsedQuery, view: CatalogView,
                    flags: dict[str, Any]) -> dict[str, Any]:
    """resultMode "sessions": each session with its label, hit count and best hit, within the budget."""
    terms = [fold(t) for t in query.terms]
    items = []
    for group in outcome.groups:
        best = hit_item(settings, view, group.best, terms, query)
        if best is None:
            continue
        meta = view.catalog.sessions.get(group.session_key)
        items.append({"sessionKey": group.session_key, "sessionId": best["sessionId"],
                      "label": meta.label if meta is not None else None, "hits": group.hits, "best": best})
    return fit(settings, {"results": []}, flags, items, outcome.more)


def response_flags(*, indexing: bool, archived: int, agent_facing: bool) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    if indexing:
        flags["indexing"] = True
    if archived:
        flags["archivedTranscriptsExcluded"] = archived
    if indexing and agent_facing:
        flags["warning"] = INDEXING_WARNING
    return flags


def render(settings: Settings, outcome: Outcome, query: ParsedQuery, view: CatalogView, flags: dict[str, Any]
           ) -> dict[str, Any]:
    """The response: hits with snippets, within the byte budget, and the flags."""
    terms = [fold(t) for t in query.terms]
    items = [item for hit in outcome.hits if (item := hit_item(settings, view, hit, terms, query)) is not None]
    return fit(settings, {"results": []}, flags, items, outcome.more)


def hit_item(settings: Settings, view: CatalogView, hit: Hit, terms: list[str], query: ParsedQuery
             ) -> dict[str, Any] | None:
    """A hit as the response shows it; None when its window left the catalog."""
    win = view.agents[hit.agent_id].windows.get(wid_of(hit.rid))
    if win is None:
        return None
    text = hit.text if hit.snippet is None else hit.snippet
    text = redact(text) if settings.redact_snippets else text
    item: dict[str, Any] = {
        "sessionKey": win.session_key,
        "sessionId": win.session_id,
        "messageId": hit.message_id,
        "role": "assistant" if hit.rid & 1 else "user",
        "timestamp": hit.ts,
        "snippet": text if hit.snippet is not None else snippet(
            text, terms, max_units=settings.snippet_max_units, prefix_last=query.prefix),
        "score": round(-hit.rank, 6),
    }
    if hit.matched_by:
        item["matchedBy"] = list(hit.matched_by)
    return item


def fit(settings: Settings, response: dict[str, Any], flags: dict[str, Any], items: list[dict[str, Any]],
        truncated: bool) -> dict[str, Any]:
    """`response` with as many of `items` as the byte budget holds, then the flags."""
    # reserve room for every flag that may still be set, so appending an item never breaks the budget
    envelope = len(json.dumps({**response, **flags, "truncated": True}, ensure_ascii=False).encode())
    budget = settings.search_response_max_bytes
    if envelope + len(json.dumps(items, ensure_ascii=False).encode()) <= budget:
        response["results"] = items  # the usual case: all of it fits, measured once
    else:  # hit by hit, skipping any that would break the budget
        used = envelope
        for item in items:
            size = len(json.dumps(item, ensure_ascii=False).encode()) + (1 if response["results"] else 0)
            if used + size > budget:
                truncated = True
                continue
            used += size
            response["results"].append(item)
    if truncated:
        flags["truncated"] = True
    response.update(flags)
    return response


async def search(req: SearchRequest, *, settings: Settings, catalog: CatalogCache, open_store: StoreLookup,
                 enqueue: Enqueue, observe: Callable[[float, bool], None] | None = None,
                 agent_facing: bool = False, newest: NewestLookup | None = None,
                 many: ManyTop | None = None, each_top: EachTop | None = None,
                 bounds: BoundsLookup | None = None, kept: KeptBounds | None = None,
                 meaning: Meaning | None = None) -> dict[str, Any]:
    """Answer a parsed search: `open_store` looks an agent's store up, `enqueue` asks for the dirty
    windows met to be reconciled (False: the queue was not reached), `observe(seconds, indexing)`
    is told each answer's latency, `newest` reads the agents' Newest (None: every agent visited),
    `many` searches many agents at once (Backend.search_top_many; None: each by itself), `each_top`
    batches the agents searched each by itself (None: a hop per statement), `bounds` reads their
    score bounds (Backend.score_bounds; None: every agent visited by relevance too), `kept` those
    kept in memory (Backend.kept_bounds)."""
    started = time.monotonic()
    deadline = started + settings.search_time_limit_ms / 1000
    sessions = req.result_mode == "sessions"
    fanout = settings.search_agents_concurrency

    async def run(query: ParsedQuery, versions: dict[str, int] | None) -> Outcome:
        if req.mode != "keyword" and meaning is not None:
            return await run_meaning(open_store, catalog, query, req, scopes, view, versions, deadline, fanout,
                                     meaning, settings, many, each_top, bounds)
        if sessions:
            return await run_sessions_query(open_store, catalog, query, req, scopes, view, versions, deadline, fanout,
                                            newest)
        return await run_query(open_store, catalog, query, req, scopes, versions, deadline, fanout, newest, many,
                               each_top, bounds, kept)

    targets = {agent_of(key) for key in req.session_keys or ()} | ({req.agent_id} if req.agent_id else set())
    for attempt in range(4):
        view = await catalog.view_with(targets, deadline)
        viewer = Viewer(settings, req.requester, view.catalog)
        scopes = plan_scopes(req, viewer, view, view.agent_ids)
        try:
            outcomes = [await run(q, view.versions) for q in req.queries]
        except MetaChanged as changed:  # by another process: its rows are read again
            catalog.invalidate(changed.agent_id)
            continue
        # an agent created elsewhere since the view was read: scope again, so that a search of every
        # agent covers it. Each search statement reads the listing (Backend.listing_version); a search
        # that sent none (no agent in scope holds a window) reads it now
        if not targets and attempt < 3 and catalog.listing_moved(fresh=not any(s.wids for s in scopes.values())):
            continue
        break
    else:  # metadata kept changing: answer from the last scope rather than spin
        outcomes = [await run(q, None) for q in req.queries]
    archived = sum(s.archived for s in scopes.values())
    dirty: dict[str, set[int]] = {}
    for outcome in outcomes:
        for agent_id, wids in outcome.dirty.items():
            dirty.setdefault(agent_id, set()).update(wids)
    reachable = True
    if dirty:
        reachable = await enqueue(dirty)
    pending: dict[str, set[int]] = {}
    for outcome in outcomes:
        for agent_id, wids in outcome.pending.items():
            pending.setdefault(agent_id, set()).update(wids)
    if pending and meaning is not None:
        reachable = await meaning.enqueue(pending) and reachable
    indexing = bool(dirty) or bool(pending) or any(o.meaning_failed for o in outcomes) or not reachable
    flags = response_flags(indexing=indexing, archived=archived, agent_facing=agent_facing)
    states = [(render_sessions if sessions else render)(settings, o, q, view, dict(flags))
              for o, q in zip(outcomes, req.queries)]
    log.info("search.done", agents=len(scopes), queries=len(req.queries), indexing=indexing,
             hits=sum(len(s["results"]) for s in states), dirty_windows=sum(len(w) for w in dirty.values()),
             ms=round((time.monotonic() - started) * 1000, 2))
    if observe is not None:
        observe(time.monotonic() - started, indexing)
    if req.batch:
        return {"states": states}
    return states[0]

