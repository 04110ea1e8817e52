"""History reads (SPEC §5): the reset-relative tail with offset paging, and anchored windows."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..errors import Conflict, Forbidden, InvalidRequest, NotFound
from ..identity import Requester
from ..keys import agent_of
from ..settings import Settings
from ..store.base import AgentStore, BranchRow, R
from .catalog import CatalogCache, StoreLookup
from .visibility import Viewer

TOOL_ROLES = frozenset({"toolResult", "tool"})
OMITTED = "[sessions_history omitted: message too large]"
CUT_MARK = "\n…(truncated)…"
MAX_LIMIT = 1000


@dataclass
class HistoryRequest:
    session_key: str
    limit: int
    offset: int | None
    message_id: str | None
    session_id: str | None
    include_tools: bool
    requester: Requester | None


def _views(branch: list[BranchRow]) -> tuple[int, list[int]]:
    """Where the current view starts (an index into `branch`) and the indexes of the resets on it.

    The current view is the latest reset's kept rows (firstKeptEntryId onwards) plus all after it.
    """
    resets = [i for i, row in enumerate(branch) if row[2] == "reset"]
    return (_view_start(branch, resets, len(resets) - 1) if resets else 0), resets


def _view_start(branch: list[BranchRow], resets: list[int], n: int) -> int:
    """Start index of the view that reset number `n` opened (-1: the view before any reset)."""
    if n < 0:
        return 0
    at = resets[n]
    kept = branch[at][4]
    if kept:
        for i in range(at - 1, -1, -1):
            if branch[i][1] == kept:
                return i
    return at + 1


def _interval(branch: list[BranchRow], anchor: int) -> tuple[int, int]:
    """[start, end) of the view a row belongs to: current if it is in it, else its original interval."""
    current, resets = _views(branch)
    if anchor >= current:
        return current, len(branch)
    n = sum(1 for r in resets if r < anchor) - 1  # the reset that opened the anchor's own view
    end = next((r for r in resets if r > anchor), len(branch))
    return _view_start(branch, resets, n), end


class _Shaper:
    """Turns stored rows into wire messages within the text, row and response byte bounds."""

    def __init__(self, settings: Settings, session_id: str) -> None:
        s = settings
        self.text_max = s.history_text_max_chars
        self.row_max = s.history_row_max_bytes
        self.budget = s.history_max_bytes
        self.session_id = session_id
        self.cut = False

    def message(self, row: tuple[Any, ...]) -> tuple[dict[str, Any], int]:
        seq, message_id, role, ts, body = row
        msg = json.loads(body).get("message", {})
        content = msg.get("content")
        if content is None and isinstance(msg.get("text"), str):
            content = msg["text"]
        content = self._cut(content)
        item = {"messageId": message_id, "sessionId": self.session_id, "role": role, "content": content,
                "timestamp": ts}
        size = len(json.dumps(item, ensure_ascii=False).encode())
        if size > self.row_max:
            self.cut = True
            item["content"] = OMITTED
            size = len(json.dumps(item, ensure_ascii=False).encode())
        return item, size + 1

    def _cut(self, content: Any) -> Any:
        if isinstance(content, str):
            if len(content) > self.text_max:
                self.cut = True
                return content[:self.text_max] + CUT_MARK
            return content
        if isinstance(content, list):
            out = []
            for block in content:
                if (isinstance(block, dict) and isinstance(block.get("text"), str)
                        and len(block["text"]) > self.text_max):
                    self.cut = True
                    block = {**block, "text": block["text"][:self.text_max] + CUT_MARK}
                out.append(block)
            return out
        return content


async def history(req: HistoryRequest, *, settings: Settings, catalog: CatalogCache, open_store: StoreLookup,
                  restore: Callable[[str], Awaitable[Any]] | None) -> dict[str, Any]:
    """Answer a parsed history read; `restore(key)` brings an archived session back (as
    sessions.restore does) when the read opens it. With `restore` None (a caller that may not write)
    a read that would open an archived session is refused (Conflict) and the session stays archived."""
    agent_id = agent_of(req.session_key)
    view = await catalog.view_with([agent_id], math.inf)
    # visibility is decided on metadata as of now, not as of the last search
    if agent_id in view.agents and await catalog.meta_version(agent_id) != view.versions.get(agent_id):
        catalog.invalidate(agent_id)
        view = await catalog.view(math.inf)
    viewer = Viewer(settings, req.requester, view.catalog)
    if view.catalog.incognito(req.session_key) or not viewer.can_see(req.session_key):
        raise Forbidden(f"session {req.session_key!r} is not visible to this requester")
    if agent_id not in view.agent_ids or req.session_key not in view.catalog.sessions:
        raise NotFound(f"session {req.session_key!r} not found")
    store = await open_store(agent_id)
    async with store.reader() as reader:
        if req.session_id is not None:
            win = await store.window_of(reader, req.session_key, req.session_id)
            if win is None:
                raise InvalidRequest(f"sessionId {req.session_id!r} is not a window of {req.session_key!r}",
                                     field="sessionId")
            candidates = [win]
        elif req.message_id is not None:
            candidates = await store.windows_of(reader, req.session_key)
        else:
            win = await store.window_of(reader, req.session_key, None)
            candidates = [win] if win else []
    if any(c[2] for c in candidates):  # opening an archived session restores it
        if restore is None:  # its rows are in a cold file: reading them means restoring, which this caller may not
            raise Conflict(f"session {req.session_key!r} is archived, and opening it would restore it, which this "
                           "read-only credential may not do; the operator can restore it (sessions.restore)")
        await restore(req.session_key)
    base = {"sessionKey": req.session_key}
    if not candidates:
        return {**base, "sessionId": None, "messages": [], "truncated": False, "totalMessages": 0,
                "offset": 0, "nextOffset": 0, "hasMore": False}
    async with store.reader() as reader:
        for wid, session_id, _cold in candidates:
            branch = await store.branch_rows(reader, wid)
            if req.message_id is None:
                return await _tail(settings, store, reader, req, wid, session_id, branch)
            anchor = next((i for i, row in enumerate(branch) if row[1] == req.message_id and row[2] == "message"), None)
            if anchor is not None:
                return await _anchored(settings, store, reader, req, wid, session_id, branch, anchor)
    return {**base, "sessionId": req.session_id or candidates[0][1], "messages": [], "truncated": False,
            "totalMessages": 0, "anchorMessageId": req.message_id, "hasOlder": False, "hasNewer": False}


def _reset_marks(branch: list[BranchRow], shown: list[int], lo: int, hi: int) -> list[dict[str, Any]]:
    """Where resets fall among the returned messages shown[lo:hi], so that a reader can mark them.

    A reset between two returned messages is always named; at an edge, only the nearest reset
    before the first (or after the last) returned message, and only when no unreturned shown
    message lies between. Each mark names the returned messages on either side (None at an edge).
    """
    resets = [i for i, row in enumerate(branch) if row[2] == "reset"]
    if not resets or lo >= hi:
        return []
    first, last = shown[lo], shown[hi - 1]
    before = [r for r in resets if r < first]
    after = [r for r in resets if r > last]
    low = shown[lo - 1] if lo > 0 else (before[-1] - 1 if before else -1)
    high = shown[hi] if hi < len(shown) else (after[0] + 1 if after else len(branch))
    returned = shown[lo:hi]
    marks = []
    for r in resets:
        if low < r < high:
            older = [i for i in returned if i < r]
            newer = [i for i in returned if i > r]
            marks.append({"resetId": branch[r][1], "afterMessageId": branch[older[-1]][1] if older else None,
                          "beforeMessageId": branch[newer[0]][1] if newer else None})
    return marks


def _messages(branch: list[BranchRow], start: int, end: int, include_tools: bool) -> list[int]:
    """Indexes of the message rows in branch[start:end] that history shows."""
    return [i for i in range(start, end)
            if branch[i][2] == "message" and (include_tools or branch[i][3] not in TOOL_ROLES)]


async def _tail(settings: Settings, store: AgentStore[R], reader: R, req: HistoryRequest, wid: int, session_id: str,
                branch: list[BranchRow]) -> dict[str, Any]:
    current, _ = _views(branch)
    shown = _messages(branch, current, len(branch), req.include_tools)
    total = len(shown)
    offset = req.offset or 0
    end = max(0, total - offset)
    page = shown[max(0, end - req.limit):end]
    rows = await store.message_rows(reader, wid, [branch[i][0] for i in page])
    shaper = _Shaper(settings, session_id)
    used = 200 + len(json.dumps(req.session_key)) + len(session_id)
    kept: list[dict[str, Any]] = []
    for row in reversed(rows):  # newest first, so the budget keeps the newest
        item, size = shaper.message(row)
        if kept and used + size > shaper.budget:
            shaper.cut = True
            break
        used += size
        kept.append(item)
    kept.reverse()
    next_offset = offset + len(kept)
    return {"sessionKey": req.session_key, "sessionId": session_id, "messages": kept,
            "truncated": shaper.cut, "totalMessages": total, "offset": offset, "nextOffset": next_offset,
            "hasMore": next_offset < total, "resets": _reset_marks(branch, shown, end - len(kept), end)}


async def _anchored(settings: Settings, store: AgentStore[R], reader: R, req: HistoryRequest, wid: int, session_id: str,
                    branch: list[BranchRow], anchor: int) -> dict[str, Any]:
    start, end = _interval(branch, anchor)
    shown = _messages(branch, start, end, req.include_tools)
    if anchor not in shown:
        shown = sorted(set(shown) | {anchor})
    at = shown.index(anchor)
    lo, hi = max(0, at - req.limit), min(len(shown), at + req.limit + 1)
    rows = await store.message_rows(reader, wid, [branch[i][0] for i in shown[lo:hi]])
    by_seq = {r[0]: r for r in rows}
    shaper = _Shaper(settings, session_id)
    anchor_item, used = shaper.message(by_seq[branch[anchor][0]])
    used += 200 + len(json.dumps(req.session_key)) + len(session_id)
    older: list[dict[str, Any]] = []
    newer: list[dict[str, Any]] = []
    i, j = at - 1, at + 1
    turn_older = True
    while len(older) + len(newer) + 1 < req.limit and (i >= 0 or j < len(shown)):
        take_older = (turn_older and i >= 0) or j >= len(shown)
        idx = i if take_older else j
        item, size = shaper.message(by_seq[branch[shown[idx]][0]])
        if used + size > shaper.budget:
            shaper.cut = True
            break
        used += size
        if take_older:
            older.append(item)
            i -= 1
        else:
            newer.append(item)
            j += 1
        turn_older = not turn_older
    messages = list(reversed(older)) + [anchor_item] + newer
    return {"sessionKey": req.session_key, "sessionId": session_id, "messages": messages,
            "truncated": shaper.cut, "totalMessages": len(shown), "anchorMessageId": req.message_id,
            "hasOlder": i >= 0, "hasNewer": j < len(shown), "resets": _reset_marks(branch, shown, i + 1, j)}
