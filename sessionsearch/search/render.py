"""A search's answer as the doors show it: hits with snippets within the byte budget, and the flags."""

from __future__ import annotations

import json
from typing import Any

from ..settings import Settings
from ..store.rowids import wid_of
from .catalog import CatalogView
from .outcome import Hit, Outcome
from .query import ParsedQuery
from .text import fold, redact, snippet

INDEXING_WARNING = "Transcript indexing is in progress; results may be incomplete. Retry sessions_search shortly."


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
