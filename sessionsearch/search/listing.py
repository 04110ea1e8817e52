"""`sessions.list` entries as a caller may see them, within a byte budget.

An entry names other sessions (`spawnedBy`, `parentSessionKey`): each is shown only when the caller
may see that session too, else null, so a listing never tells a scoped caller a key it could not
search or read. The response fits in `list_response_max_bytes` of JSON as search's does: entries
are added in order while they fit, one that does not is left out, and `truncated: true` then says
so; a title longer than TITLE_MAX_UNITS UTF-16 units is cut (with "…") first, so one huge label
costs its entry only that much.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import InvalidRequest
from ..store.base import Position as Position  # the cursor's, re-exported for protocol/
from ..store.base import SessionMeta
from ..text.utf16 import cut_utf16, utf16_len
from .visibility import Viewer

TITLE_MAX_UNITS = 1000


def _title(text: str | None) -> str | None:
    if text is None or utf16_len(text) <= TITLE_MAX_UNITS:
        return text
    return cut_utf16(text, TITLE_MAX_UNITS) + "…"


def _shown_key(viewer: Viewer, key: str | None) -> str | None:
    return key if key is not None and viewer.can_see(key) else None


def entry(meta: SessionMeta, viewer: Viewer, updated_at: int) -> dict[str, Any]:
    """One listed session; the keys it names only where `viewer` may see them."""
    return {"sessionKey": meta.session_key, "sessionId": meta.session_id, "label": _title(meta.label),
            "displayName": _title(meta.display_name), "kind": meta.kind, "group": meta.group,
            "spawnedBy": _shown_key(viewer, meta.spawned_by),
            "parentSessionKey": _shown_key(viewer, meta.parent_session_key),
            "updatedAt": updated_at, "archived": meta.archived_at is not None}




# a cursor: the last listed session's updatedAt and key. Opaque to callers; readable, so that any
# string the schema's pattern allows is one (a schema-valid request is never refused)
CURSOR_PATTERN = "^-?[0-9]{1,16}~[\\s\\S]"
_CURSOR = re.compile(r"(-?[0-9]{1,16})~([\s\S]+)")


def encode_cursor(position: Position) -> str:
    """The opaque `nextCursor` that resumes the list after `position` (updatedAt, sessionKey)."""
    return f"{position[0]}~{position[1]}"


def parse_cursor(value: object) -> Position | None:
    """A `cursor` as the position the list resumes after; InvalidRequest when it is none of ours."""
    if value is None:
        return None
    found = _CURSOR.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        raise InvalidRequest("cursor is not valid", field="cursor")
    return int(found[1]), found[2]


def fit_listing(entries: list[dict[str, Any]], *, max_bytes: int, more: bool, paged: bool = False) -> dict[str, Any]:
    """The response holding as many of `entries` as `max_bytes` of JSON do; `more`: entries past the
    limit existed (which sets `truncated` too). `paged`: an entry that does not fit ends the page
    (the next one resumes from there) instead of being left out."""
    envelope = len(json.dumps({"sessions": [], "truncated": True}, ensure_ascii=False).encode())
    kept: list[dict[str, Any]] = []
    used = envelope
    truncated = more
    for item in entries:
        size = len(json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode()) + (1 if kept else 0)
        if used + size > max_bytes:
            truncated = True
            if paged and kept:
                break
            continue
        used += size
        kept.append(item)
    out: dict[str, Any] = {"sessions": kept}
    if truncated:
        out["truncated"] = True
    return out
