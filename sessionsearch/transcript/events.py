"""Transcript event rules (SPEC §2): validation, indexable text and timestamps."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import InvalidRequest
from ..values import MAX_JSON_DEPTH, check_json

TREE_TYPES = frozenset({
    "message", "reset", "model_change", "thinking_level_change", "compaction", "branch_summary",
    "custom", "custom_message", "label", "session_info",
})
EVENT_TYPES = TREE_TYPES | {"session", "leaf"}
# the roles the agent runtime writes (SPEC §2); any other non-empty role is carried too, never indexed
ROLES = frozenset({"user", "assistant", "toolResult", "system", "bashExecution", "custom", "branchSummary",
                   "compactionSummary"})
INDEXED_ROLES = frozenset({"user", "assistant"})
TEXT_BLOCKS = frozenset({"text", "input_text", "output_text"})
RESET_REASONS = frozenset({"new", "reset", "idle", "daily", "cron-stale"})
MAX_EVENT_DEPTH = MAX_JSON_DEPTH
# Timestamps every consumer can represent (SQLite integers, datetime, the CLI's formatting):
# 0001-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z in epoch milliseconds.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MIN_TS_MS = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)
MAX_TS_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)
TS_RANGE = f"between {MIN_TS_MS} and {MAX_TS_MS} (years 1 to 9999 UTC)"


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
    # numeric timestamps first: their range is a better answer than the general finite-number rule
    _range_checked(raw.get("timestamp"), f"{where}.timestamp")
    if isinstance(raw.get("message"), dict):
        _range_checked(raw["message"].get("timestamp"), f"{where}.message.timestamp")
    check_json(raw, where, max_depth=MAX_EVENT_DEPTH)
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
        if not isinstance(role, str) or not role:
            raise InvalidRequest(f"{where}.message.role: must be a non-empty string", field=f"{where}.message.role")
        if "\x00" in role:  # stored as a column, like a key: refused with NUL on every store (values.py)
            raise InvalidRequest(f"{where}.message.role: must not contain NUL (U+0000)",
                                 field=f"{where}.message.role")
        # only indexed roles' content has a shape to check: every other role is carried as written
        indexable = message_text(msg, f"{where}.message") if role in INDEXED_ROLES else None
        # checked (stored, and read by the gateway's clients) but never the hit's time: the runtime
        # sets it when the message began, the event's when it was written, seconds apart (SPEC §2)
        mts = msg.get("timestamp")
        if mts is not None and (isinstance(mts, bool) or not isinstance(mts, (int, float, str))):
            raise InvalidRequest(f"{where}.message.timestamp: must be epoch milliseconds",
                                 field=f"{where}.message.timestamp")
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
    text = msg.get("text")
    if isinstance(text, str):
        return text.strip()
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
        return epoch_ms(value, where)
    if not isinstance(value, str):
        raise InvalidRequest(f"{where}: must be an ISO 8601 time", field=where)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(f"{where}: {value[:40]!r} is not an ISO 8601 time", field=where) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    ms = (moment - _EPOCH) // timedelta(milliseconds=1)  # exact: no float rounding of the milliseconds
    if not MIN_TS_MS <= ms <= MAX_TS_MS:
        raise InvalidRequest(f"{where}: {value[:40]!r} is not a time {TS_RANGE}", field=where)
    return ms


def _range_checked(value: object, where: str) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        epoch_ms(value, where)


def epoch_ms(value: int | float, where: str) -> int:
    """A numeric timestamp as whole epoch milliseconds; InvalidRequest naming `where` unless it is a
    finite number within years 1 to 9999."""
    if (isinstance(value, float) and not math.isfinite(value)) or not MIN_TS_MS <= value <= MAX_TS_MS:
        raise InvalidRequest(f"{where}: {value!r} is not epoch milliseconds {TS_RANGE}", field=where)
    return int(value)
