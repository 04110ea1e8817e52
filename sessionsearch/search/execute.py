"""Running a search's plan (plan.py) over the backend's seam: one time-budgeted statement per agent,
a batch of them a hop, or one statement of many agents, as the plan says; then the merge.

`recent` over many agents visits them newest first and stops once the hits in hand settle the
answer (visits.newest_first); relevance over many agents with score bounds visits them best first
(visits.best_first)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import partial

from ..store.base import Match, Newest, ScoreBound, TopHits
from ..store.rowids import wid_of
from .catalog import CatalogCache
from .context import SearchContext
from .outcome import Hit, Outcome, SessionGroup
from .plan import KeywordPlan, Path, Scope, plan_keyword
from .query import ParsedQuery, SearchRequest
from .visits import MetaChanged, best_first, bounded, check_version, newest_first

BATCH = 50  # agents whose statements one hop of Backend.search_top_each runs (Path.BATCHED)

# one agent's answer: its id, its hits in scope, whether it had k or more, its dirty windows in scope
Found = tuple[str, list[Hit], bool, set[int]]


async def run_query(ctx: SearchContext, query: ParsedQuery, req: SearchRequest, scopes: dict[str, Scope],
                    versions: dict[str, int] | None, deadline: float, *, by_newest: bool = True) -> Outcome:
    """Top hits of one query over the scopes, by the path plan_keyword picks; raises MetaChanged
    when scoping went stale. `versions` None answers from the given scopes whatever the metadata
    now says; `by_newest` False: never newest first (a hybrid query's keyword part)."""
    out = Outcome()
    if query.match is None:
        return out
    k = req.limit + 1
    await check_empty_scopes(ctx.catalog, scopes, versions, deadline)
    todo = [scope for scope in scopes.values() if scope.wids]
    plan = plan_keyword(ctx.backend, query.match, req.order, todo, k, by_newest=by_newest)
    run = _Keyword(ctx, query.match, query.hot_token, req, versions, deadline, k)
    for agent_id, hits, more, dirty in await run.path(plan, todo):
        out.hits += hits
        out.more |= more
        if dirty:
            out.dirty[agent_id] = dirty
    out.hits.sort(key=lambda h: h.sort_key(req.order))
    if len(out.hits) > req.limit:
        out.more = True
        out.hits = out.hits[:req.limit]
    return out


class _Keyword:
    """One keyword query's reads of the agents, each path's way."""

    def __init__(self, ctx: SearchContext, match: Match, hot: str | None, req: SearchRequest,
                 versions: dict[str, int] | None, deadline: float, k: int) -> None:
        self.ctx, self.match, self.hot, self.req = ctx, match, hot, req
        self.versions, self.deadline, self.k = versions, deadline, k

    async def path(self, plan: KeywordPlan, todo: list[Scope]) -> list[Found]:
        k, fanout = self.k, self.ctx.fanout
        if plan.path is Path.NEWEST_FIRST:
            known = await read_newest(self.ctx, todo, self.deadline)
            return await newest_first(self.each, todo, known=known, versions=self.versions, k=k, fanout=fanout,
                                      times=lambda found: (h.ts for h in found[1]), passed=_passed,
                                      # newest_first has read every agent's Newest: a sparse search
                                      rest=partial(self.together, sparse=True) if plan.together else None,
                                      split=plan.whole, since=self.req.since, until=self.req.until,
                                      matchless=self.matchless if plan.kept else None,
                                      hop=self.batch if self.ctx.backend.features.batches_agents else None,
                                      batch=BATCH)
        if plan.path is Path.TOGETHER_BEST_FIRST:
            known_bounds = await self.bounds(todo)
            if known_bounds is not None:  # k in the first hop: an agent may hold one hit
                return await best_first(self.every, todo, known_bounds, k=k, batch=len(todo), fanout=1, first=k,
                                        ranks=_ranks, passed=_passed_over)
        if plan.path in (Path.TOGETHER, Path.TOGETHER_BEST_FIRST):
            return await self.every(todo)
        if plan.path is Path.BATCHED:
            known_bounds = await self.bounds(todo) if plan.bounds else None
            if known_bounds is not None:  # by relevance, best first while an agent left may hold a top hit
                return await best_first(self.batch, todo, known_bounds, k=k, batch=BATCH, fanout=fanout,
                                        ranks=_ranks, passed=_passed_over)
            batches = await bounded(self.batch, [todo[i:i + BATCH] for i in range(0, len(todo), BATCH)], fanout)
            return [found for answers in batches for found in answers]
        return await bounded(self.each, todo, fanout)

    async def each(self, scope: Scope) -> Found:
        """One agent's own statement, through a reader of its store."""
        store = await self.ctx.host.store(scope.agent_id)
        async with store.reader(self.deadline) as reader:
            top = await store.search_top(
                reader, self.match, k=self.k, order=self.req.order, include=scope.include, exclude=scope.exclude,
                role=self.req.role, hot=self.hot, since=self.req.since, until=self.req.until)
        assert top is not None  # None only where `ties` is False
        return hits_of(scope, top, self.versions, self.k)

    async def batch(self, scopes: list[Scope]) -> list[Found]:
        """The agents' statements in one hop (Backend.search_top_each)."""
        req = self.req
        tops = await self.ctx.backend.search_top_each(
            await self.ctx.stores([s.agent_id for s in scopes]), self.match, [(s.include, s.exclude) for s in scopes],
            deadline=self.deadline, k=self.k, order=req.order, role=req.role, hot=self.hot, since=req.since,
            until=req.until)
        return [hits_of(scope, top, self.versions, self.k) for scope, top in zip(scopes, tops, strict=True)]

    async def together(self, scopes: list[Scope], sparse: bool = False) -> list[Found | None]:
        """The scopes' hits among the top k of them all, in one search (Backend.search_top_many);
        (`sparse`) None for an agent left unread. run_query's cut decides `more`."""
        req = self.req
        exclude = sorted({wid for scope in scopes for wid in scope.exclude})
        tops = await self.ctx.backend.search_top_many(
            await self.ctx.stores([s.agent_id for s in scopes]), self.match, k=self.k, order=req.order,
            exclude=exclude, role=req.role, since=req.since, until=req.until, deadline=self.deadline, sparse=sparse)
        found: list[Found | None] = []
        for scope, top in zip(scopes, tops, strict=True):
            if top is None:
                found.append(None)
                continue
            agent_id, hits, _, dirty = hits_of(scope, top, self.versions, self.k)
            found.append((agent_id, hits, False, dirty))
        return found

    async def every(self, scopes: list[Scope]) -> list[Found]:
        """`together`, every agent read."""
        found = [agent for agent in await self.together(scopes) if agent is not None]
        assert len(found) == len(scopes)  # only a sparse search leaves one out
        return found

    async def matchless(self, scopes: list[Scope]) -> set[str]:
        """The agents whose bounds kept in memory say they hold no match (no read)."""
        kept = self.ctx.backend.kept_bounds(await self.ctx.stores([s.agent_id for s in scopes]), self.match)
        return {s.agent_id for s, bound in zip(scopes, kept, strict=True)
                if bound is not None and bound.bound == -math.inf}

    async def bounds(self, todo: list[Scope]) -> list[ScoreBound] | None:
        """The agents' score bounds (Backend.score_bounds; None: not worth reading now)."""
        known = await self.ctx.backend.score_bounds(await self.ctx.stores([s.agent_id for s in todo]), self.match,
                                                    self.deadline)
        for scope, bound in zip(todo, known, strict=True) if known is not None else ():
            check_version(self.versions, scope.agent_id, bound.meta_version)
        return known


def _ranks(found: Found) -> Iterable[float]:
    return (h.rank for h in found[1])


def _passed(scope: Scope, dirty: set[int]) -> Found:
    return scope.agent_id, [], False, dirty


def _passed_over(scope: Scope, bound: ScoreBound) -> Found:
    return scope.agent_id, [], False, scope.wids.intersection(bound.dirty)


async def read_newest(ctx: SearchContext, scopes: list[Scope], deadline: float) -> dict[str, Newest]:
    """The agents' Newest as committed now (Backend.newest), by agent id."""
    agent_ids = [s.agent_id for s in scopes]
    return dict(zip(agent_ids, await ctx.backend.newest(await ctx.stores(agent_ids), deadline), strict=True))


async def check_empty_scopes(catalog: CatalogCache, scopes: dict[str, Scope], versions: dict[str, int] | None,
                             deadline: float) -> None:
    """A scope this view holds empty is checked before it answers nothing (MetaChanged if stale)."""
    if versions is not None:
        for scope in scopes.values():
            # raised even for Versions: the view may not know the agent's first windows yet
            if not scope.wids and await catalog.meta_version(scope.agent_id, deadline) != versions.get(scope.agent_id):
                raise MetaChanged(scope.agent_id)


def hits_of(scope: Scope, top: TopHits, versions: dict[str, int] | None, k: int) -> Found:
    """An agent's hits in scope, whether it had `k` or more, and its dirty windows in scope;
    MetaChanged when its meta version is not the view's."""
    version, dirty, rows = top
    # a row of a window no longer in the catalog (an orphan awaiting the sweep) is never a hit; of an
    # agent read at a newer meta version (Versions) every row is kept: the runner checks them
    # against the windows in scope as the metadata is now
    wids = scope.wids if check_version(versions, scope.agent_id, version) else None
    hits = [Hit(scope.agent_id, r.row_id, r.score, r.message_id, r.ts, r.text)
            for r in rows if wids is None or wid_of(r.row_id) in wids]
    return scope.agent_id, hits, len(rows) >= k, scope.wids.intersection(dirty)


async def run_sessions_query(ctx: SearchContext, query: ParsedQuery, req: SearchRequest, scopes: dict[str, Scope],
                             versions: dict[str, int] | None, deadline: float) -> Outcome:
    """resultMode "sessions": the sessions in the order of their best hits, each with its hits in
    scope counted; raises MetaChanged as run_query does.

    Per agent, in one snapshot: messages mode's top hits (postings as it would use them), which
    settle the sessions when they hold enough of them; else one statement ranking every match's
    session (store/sqlite/sessions.py).
    """
    out = Outcome()
    if query.match is None:
        return out
    await check_empty_scopes(ctx.catalog, scopes, versions, deadline)
    found = await _sessions_top(ctx, query.match, req, scopes, versions, deadline, query.hot_token)
    for agent_id, _, dirty in found:
        if dirty:
            out.dirty[agent_id] = dirty
    groups = sorted((g for _, agent_groups, _ in found for g in agent_groups), key=lambda g: g.sort_key(req.order))
    out.more = len(groups) > req.limit
    out.groups = groups[:req.limit]
    return out


async def _sessions_top(ctx: SearchContext, match: Match, req: SearchRequest, scopes: dict[str, Scope],
                        versions: dict[str, int] | None, deadline: float, hot: str | None = None
                        ) -> list[tuple[str, list[SessionGroup], set[int]]]:
    """Per agent in scope: its top `limit + 1` sessions and the dirty windows in scope (a few
    agents' statements at once; by `recent`, newest_first's agents)."""
    async def agent(scope: Scope) -> tuple[str, list[SessionGroup], set[int]]:
        store = await ctx.host.store(scope.agent_id)
        async with store.reader(deadline) as reader:
            version, dirty, rows = await store.search_sessions(
                reader, match, k=req.limit + 1, order=req.order, include=scope.include,
                exclude=scope.exclude, role=req.role, since=req.since, until=req.until, hot=hot)
        # a best hit in a window no longer in the catalog (an orphan awaiting the sweep) shows
        # nothing; moved since the view (Versions), every one is kept, as hits_of keeps them
        wids = scope.wids if check_version(versions, scope.agent_id, version) else None
        groups = [SessionGroup(scope.agent_id, key, hits, Hit(scope.agent_id, *best))
                  for key, hits, best in rows if wids is None or wid_of(best[0]) in wids]
        return scope.agent_id, groups, scope.wids.intersection(dirty)

    todo = [scope for scope in scopes.values() if scope.wids]
    if req.order == "recent" and len(todo) > 1:
        # a session's place is its best hit's: its newest, no newer than its agent's bound
        return await newest_first(agent, todo, known=await read_newest(ctx, todo, deadline), versions=versions,
                                  k=req.limit + 1, fanout=ctx.fanout, times=lambda found: (g.best.ts for g in found[1]),
                                  passed=lambda scope, dirty: (scope.agent_id, [], dirty), since=req.since,
                                  until=req.until)
    return await bounded(agent, todo, ctx.fanout)
