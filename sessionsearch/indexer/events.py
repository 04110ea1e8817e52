"""Transcript event rules (SPEC §2): validation, indexable text and timestamps."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..errors import InvalidRequest

TREE_TYPES = frozenset({
    "message", "reset", "model_change", "thinking_level_change", "compaction", "branch_summary",
    "custom", "custom_message", "label", "session_info",
})
EVENT_TYPES = TREE_TYPES | {"session", "leaf"}
ROLES = frozenset({"user", "assistant", "toolResult", "system"})
INDEXED_ROLES = frozenset({"user", "assistant"})
TEXT_BLOCKS = frozenset({"text", "input_text", "output_text"})
RESET_REASONS = frozenset({"new", "reset", "idle", "daily", "cron-stale"})


@dataclass(slots=True)
class Event:
    """A validated transcript event, with what the store and indexer need pulled out."""

    type: str
    event_id: str | None
    parent: str | None  # the parentId when given (None for an explicit null)
    has_parent: bool  # False for parentless rows of older writers
    side: bool
    role: str | None
    text: str | None  # indexable text, None when the event is not indexed
    ts: int  # epoch ms
    target_id: str | None  # leaf controls
    first_kept_id: str | None  # resets
    body: dict[str, Any]
    raw: str | None = None  # the row's JSON text as received, stored as is when given


def parse_event(raw: object, where: str, *, now_ms: int | None = None, source: str | None = None) -> Event:
    """Validate one event; raise InvalidRequest naming `where` and the field at fault.

    `source` is the event's JSON as read (an import line); it is kept as the stored body.
    """
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{where}: must be a JSON object", field=where)
    etype = raw.get("type")
    if not isinstance(etype, str) or not etype:
        raise InvalidRequest(f"{where}.type: must be a non-empty string", field=f"{where}.type")
    if etype not in EVENT_TYPES:
        raise InvalidRequest(f"{where}.type: unknown event type {etype!r}", field=f"{where}.type")
    event_id = raw.get("id")
    if event_id is not None and not isinstance(event_id, str):
        raise InvalidRequest(f"{where}.id: must be a string", field=f"{where}.id")
    event_id = event_id or None
    has_parent = "parentId" in raw
    parent = raw.get("parentId")
    if parent is not None and not isinstance(parent, str):
        raise InvalidRequest(f"{where}.parentId: must be a string or null", field=f"{where}.parentId")
    mode = raw.get("appendMode")
    if mode not in (None, "side"):
        raise InvalidRequest(f"{where}.appendMode: must be \"side\" when given", field=f"{where}.appendMode")
    ts = _event_ts(raw.get("timestamp"), f"{where}.timestamp")
    role = indexable = target = kept = None
    if etype == "message":
        msg = raw.get("message")
        if not isinstance(msg, dict):
            raise InvalidRequest(f"{where}.message: must be an object", field=f"{where}.message")
        role = msg.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise InvalidRequest(f"{where}.message.role: must be one of user, assistant, toolResult, system",
                                 field=f"{where}.message.role")
        indexable = message_text(msg, f"{where}.message")
        mts = msg.get("timestamp")
        if mts is not None:
            if isinstance(mts, bool) or not isinstance(mts, (int, float)):
                if not isinstance(mts, str):
                    raise InvalidRequest(f"{where}.message.timestamp: must be epoch milliseconds",
                                         field=f"{where}.message.timestamp")
            else:
                ts = int(mts)
        if role not in INDEXED_ROLES or not event_id or not indexable:
            indexable = None
    elif etype == "leaf":
        target = raw.get("targetId")
        if not isinstance(target, str) or not target:
            raise InvalidRequest(f"{where}.targetId: must be a non-empty string", field=f"{where}.targetId")
    elif etype == "reset":
        kept = raw.get("firstKeptEntryId")
        if kept is not None and not isinstance(kept, str):
            raise InvalidRequest(f"{where}.firstKeptEntryId: must be a string", field=f"{where}.firstKeptEntryId")
        reason = raw.get("reason")
        if reason is not None and (not isinstance(reason, str) or reason not in RESET_REASONS):
            raise InvalidRequest(f"{where}.reason: must be one of {', '.join(sorted(RESET_REASONS))}",
                                 field=f"{where}.reason")
    if ts is None:
        ts = now_ms if now_ms is not None else int(time.time() * 1000)
    return Event(etype, event_id, parent, has_parent, mode == "side", role, indexable, ts, target, kept or None,
                 raw, source)


def message_text(msg: dict[str, Any], where: str = "message") -> str:
    """The indexable text of a message: string content, else `text`, else the text blocks joined."""
    content = msg.get("content")
    if isinstance(content, str):
        return content.strip()
    if isinstance(msg.get("text"), str):
        return msg["text"].strip()
    if content is None:
        return ""
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}.content: must be a string or a list of blocks", field=f"{where}.content")
    parts = []
    for i, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise InvalidRequest(f"{where}.content[{i}]: must be an object with a string type",
                                 field=f"{where}.content[{i}]")
        if block["type"] in TEXT_BLOCKS:
            value = block.get("text")
            if not isinstance(value, str):
                raise InvalidRequest(f"{where}.content[{i}].text: must be a string",
                                     field=f"{where}.content[{i}].text")
            parts.append(value)
    return "\n".join(parts).strip()


def _event_ts(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidRequest(f"{where}: must be an ISO 8601 time", field=where)
    if isinstance(value, (int, float)):
        return int(value)
    if not isinstance(value, str):
        raise InvalidRequest(f"{where}: must be an ISO 8601 time", field=where)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(f"{where}: {value[:40]!r} is not an ISO 8601 time", field=where) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)
