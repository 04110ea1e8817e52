"""Running a search: scope it, run each query, and answer (the entry the engine calls).

plan.py picks what each agent in scope may read and the path a query takes, from what the backend
declares it can do; execute.py (keyword) and meaning.py (semantic, hybrid) run it over the store's
seam; render.py makes the answer."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import structlog

from ..keys import agent_of
from ..store.rowids import wid_of
from .catalog import CatalogView
from .context import SearchContext
from .execute import run_query, run_sessions_query
from .listing import entry
from .meaning import run_meaning
from .outcome import Outcome
from .plan import Scope, plan_scopes, scoped_sessions
from .query import MAX_LIMIT, ParsedQuery, SearchRequest
from .render import render, render_sessions, response_flags
from .visibility import Viewer
from .visits import MetaChanged, Versions

log = structlog.get_logger("sessionsearch.search")


async def search(req: SearchRequest, ctx: SearchContext, *, agent_facing: bool = False) -> dict[str, Any]:
    """Answer a parsed search in `ctx` (its settings, catalog, backend and host): scope it, run each
    query (plan.py picks the path, execute.py and meaning.py run it), ask the host to reconcile or
    embed the windows met that need it, and tell it the answer's latency."""
    settings = ctx.settings
    started = time.monotonic()
    deadline = started + settings.search_time_limit_ms / 1000
    sessions = req.result_mode == "sessions"

    async def run(query: ParsedQuery, versions: dict[str, int] | None) -> Outcome:
        if req.mode != "keyword":
            return await run_meaning(ctx, query, req, scopes, view, versions, deadline)
        if sessions:
            return await run_sessions_query(ctx, query, req, scopes, versions, deadline)
        return await run_query(ctx, query, req, scopes, versions, deadline)

    catalog = ctx.catalog
    targets = {agent_of(key) for key in req.session_keys or ()} | ({req.agent_id} if req.agent_id else set())
    for attempt in range(4):
        view = await catalog.view_with(targets, deadline)
        viewer = Viewer(settings, req.requester, view.catalog)
        selected = await scoped_sessions(req, viewer, view, ctx.backend, ctx.stores, deadline)
        scopes = plan_scopes(req, viewer, view, view.agent_ids, selected)
        versions = Versions(view.versions)
        try:
            outcomes = [await run(q, versions) for q in req.queries]
        except MetaChanged as changed:  # by another process: its rows are read again
            catalog.invalidate(changed.agent_id)
            continue
        if versions.moved:  # the answer stands if the metadata as it is now scopes it alike
            again = await _scoped_alike(req, ctx, scopes, versions.moved, outcomes, deadline)
            if again is None:
                continue
            view, viewer, scopes = again
        # an agent created elsewhere since the view was read: scope again, so that a search of every
        # agent covers it. Each search statement reads the listing (Backend.listing_version); a search
        # that sent none (no agent in scope holds a window) reads it now
        if not targets and attempt < 3 and catalog.listing_moved(fresh=not any(s.wids for s in scopes.values())):
            continue
        break
    else:  # metadata kept changing: answer from the last scope rather than spin
        outcomes = [await run(q, None) for q in req.queries]
    archived = sum(s.archived for s in scopes.values())
    dirty = _union(o.dirty for o in outcomes)
    reachable = True
    if dirty:
        reachable = await ctx.host.enqueue_reconcile(dirty)
    pending = _union(o.pending for o in outcomes)
    if pending:
        reachable = await ctx.host.enqueue_embed(pending) and reachable
    indexing = bool(dirty) or bool(pending) or any(o.meaning_failed for o in outcomes) or not reachable
    flags = response_flags(indexing=indexing, archived=archived, agent_facing=agent_facing)
    states = [(render_sessions if sessions else render)(settings, o, q, view, dict(flags))
              for o, q in zip(outcomes, req.queries)]
    if req.scope is not None:
        for state in states:
            state["sessions"] = session_rows(state, view, viewer, settings.search_response_max_bytes)
    log.info("search.done", agents=len(scopes), queries=len(req.queries), indexing=indexing,
             hits=sum(len(s["results"]) for s in states), dirty_windows=sum(len(w) for w in dirty.values()),
             ms=round((time.monotonic() - started) * 1000, 2))
    ctx.host.observe_search(time.monotonic() - started, indexing)
    if req.batch:
        return {"states": states}
    return states[0]


async def _scoped_alike(req: SearchRequest, ctx: SearchContext, scopes: dict[str, Scope], moved: set[str],
                        outcomes: list[Outcome], deadline: float
                        ) -> tuple[CatalogView, Viewer, dict[str, Scope]] | None:
    """The catalog read again for the agents read at a newer meta version than the search scoped
    them at (`moved`), and the scopes planned from it, when every agent's statement would read the
    same windows by them (the same include and exclude) and every hit of a moved agent lies in its
    windows in scope now; else None: scope again. Such an answer is the one a search scoped now
    would give, so a session created while a search of every agent runs (a new window of an agent
    scoped by exclusion) costs a read of its agent's changes, not a search of every agent again."""
    catalog = ctx.catalog
    for agent_id in moved:
        catalog.invalidate(agent_id)
    view = await catalog.view(deadline)
    viewer = Viewer(ctx.settings, req.requester, view.catalog)
    selected = await scoped_sessions(req, viewer, view, ctx.backend, ctx.stores, deadline)
    now = plan_scopes(req, viewer, view, view.agent_ids, selected)
    if now.keys() != scopes.keys() or any((s.include, s.exclude) != (now[a].include, now[a].exclude)
                                          for a, s in scopes.items()):
        return None
    for outcome in outcomes:
        for hit in [*outcome.hits, *(g.best for g in outcome.groups)]:
            if hit.agent_id in moved and wid_of(hit.rid) not in now[hit.agent_id].wids:
                return None
    # a moved agent's windows waiting for reconciliation, read now, in its scope as it is now: one
    # that joined it (a side append opening a session) answers `indexing`, one that left does not
    movers = sorted(moved & now.keys())
    newest = await ctx.backend.newest(await ctx.stores(movers), deadline)
    for agent_id, known in zip(movers, newest, strict=True):
        if known.meta_version != view.versions.get(agent_id):
            return None
        for outcome in outcomes:
            dirty = now[agent_id].wids.intersection(known.dirty)
            if dirty:
                outcome.dirty[agent_id] = dirty
            else:
                outcome.dirty.pop(agent_id, None)
    return view, viewer, now


def session_rows(state: dict[str, Any], view: CatalogView, viewer: Viewer, max_bytes: int) -> list[dict[str, Any]]:
    """A scoped answer's `sessions`: the rows of the sessions its hits come from, in hit order, while
    the whole answer stays within `max_bytes` of JSON (a row that does not fit ends them, and sets
    `truncated`). Their `updatedAt` is the catalog's (its last read of the metadata and appends)."""
    rows: list[dict[str, Any]] = []
    used = len(json.dumps({**state, "sessions": [], "truncated": True}, ensure_ascii=False).encode())
    for key in dict.fromkeys(hit["sessionKey"] for hit in state["results"]):
        meta = view.catalog.sessions.get(key)
        if meta is None or len(rows) >= MAX_LIMIT:
            continue
        row = entry(meta, viewer, meta.updated_at)
        size = len(json.dumps(row, ensure_ascii=False).encode()) + 2
        if used + size > max_bytes:
            state["truncated"] = True
            break
        used += size
        rows.append(row)
    return rows


def _union(by_agent: Iterable[dict[str, set[int]]]) -> dict[str, set[int]]:
    """Windows by agent, of every outcome."""
    out: dict[str, set[int]] = {}
    for windows in by_agent:
        for agent_id, wids in windows.items():
            out.setdefault(agent_id, set()).update(wids)
    return out
