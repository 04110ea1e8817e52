"""The writes: `sessions.upsert`, `transcript.append`, `sessions.rotate`, `sessions.delete`,
`sessions.archive` and `sessions.restore`: their requests and answers."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field, PlainValidator, WithJsonSchema
from typing_extensions import TypedDict

from ..errors import InvalidRequest
from ..keys import check_session_key
from ..session_meta import KINDS, check_meta
from ..transcript.events import EVENT_TYPES, MAX_TS_MS, MIN_TS_MS, RESET_REASONS, ROLES, TEXT_BLOCKS
from .base import (
    ID_SCHEMA,
    NAME_SCHEMA,
    NO_NUL,
    NULLABLE_STRING,
    SESSION_KEY_SCHEMA,
    STRING,
    Id,
    Params,
    SessionKey,
    Text,
    checked,
    nullable,
    required,
)

MAX_EVENTS_PER_APPEND = 10_000
KEY_HELP = "the session's key, agent:<agentId>:<rest> (a key without the prefix belongs to agent main)"

EPOCH_MS = {"type": "number", "minimum": MIN_TS_MS, "maximum": MAX_TS_MS}
BLOCK = {"type": "object", "required": ["type"], "properties": {"type": STRING},
         "if": {"properties": {"type": {"enum": sorted(TEXT_BLOCKS)}}},
         "then": {"required": ["text"], "properties": {"text": STRING}}}
# the indexer reads `content` when it is a string, else `text` when that is, else the content blocks
MESSAGE_IN = {"type": "object", "required": ["role"],
              "properties": {"role": {"type": "string", "minLength": 1, "pattern": NO_NUL, "examples": sorted(ROLES)},
                             "timestamp": nullable({"anyOf": [EPOCH_MS, STRING]})},
              "anyOf": [{"required": ["text"], "properties": {"text": STRING}},
                        {"properties": {"content": {"anyOf": [NULLABLE_STRING,
                                                              {"type": "array", "items": BLOCK}]}}}]}


def _when(event_type: str, then: dict[str, Any]) -> dict[str, Any]:
    return {"if": {"properties": {"type": {"const": event_type}}}, "then": then}


EVENT = {"type": "object", "required": ["type"], "description": "a transcript row in the gateway's format",
         "properties": {"type": {"enum": sorted(EVENT_TYPES)}, "id": NAME_SCHEMA, "parentId": NAME_SCHEMA,
                        "appendMode": {"enum": ["side", None]},
                        "timestamp": nullable({"anyOf": [EPOCH_MS, {"type": "string", "format": "date-time"}]})},
         "allOf": [_when("message", {"required": ["message"], "properties": {"message": MESSAGE_IN}}),
                   _when("leaf", {"required": ["targetId"], "properties": {"targetId": ID_SCHEMA}}),
                   _when("reset", {"properties": {"firstKeptEntryId": NAME_SCHEMA,
                                                  "reason": {"enum": [*sorted(RESET_REASONS), None]}}})]}


def _events(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidRequest("events must be a list of transcript events", field="events")
    if len(value) > MAX_EVENTS_PER_APPEND:
        raise InvalidRequest(f"events must hold at most {MAX_EVENTS_PER_APPEND} events", field="events")
    return value


def _as_sent(value: Any, field: str) -> Any:
    return value  # the model's own check (check_body) has passed it


Events = Annotated[list[Any], checked(_events), WithJsonSchema(
    {"type": "array", "maxItems": MAX_EVENTS_PER_APPEND, "items": EVENT})]
MetaName = Annotated[str | None, checked(_as_sent), WithJsonSchema(NAME_SCHEMA)]
MetaKey = Annotated[str | None, checked(_as_sent), WithJsonSchema(nullable(SESSION_KEY_SCHEMA))]
Kind = Annotated[Literal["direct", "group", "subagent", "cron", "system"] | None, checked(_as_sent),
                 WithJsonSchema({"enum": [*KINDS, None]})]
Incognito = Annotated[bool | None, PlainValidator(lambda value: value), WithJsonSchema({"type": ["boolean", "null"]})]


class UpsertParams(Params):
    """A session's metadata: each field given is set, a null one cleared (a null incognito is absent)."""

    NULL_IS_ABSENT = False

    session_key: SessionKey = required(description=KEY_HELP)
    session_id: MetaName = Field(None, description="the session's current window id")
    label: MetaName = Field(None, description="the session's title")
    display_name: MetaName = Field(None, description="the name the gateway shows for it")
    spawned_by: MetaKey = Field(None, description="the session that spawned this one (visibility follows it)")
    parent_session_key: MetaKey = Field(None, description="the session this one belongs under")
    kind: Kind = Field(None, description="one of " + ", ".join(KINDS))
    group: MetaName = Field(None, description="the group chat it belongs to")
    incognito: Incognito = Field(None, description="true: its text is never given to an embedder; null: unchanged")

    @classmethod
    def check_body(cls, body: dict[str, Any]) -> dict[str, Any]:
        if "sessionKey" not in body:
            raise InvalidRequest("sessionKey is required", field="sessionKey")
        check_session_key(body["sessionKey"])
        # session_meta.py's rules, which an import shares, in the order an upsert has always reported them
        fields = {k: v for k, v in body.items() if k != "sessionKey" and (v is not None or k != "incognito")}
        _, problems = check_meta(fields)
        if problems:
            raise problems[0]
        return {"sessionKey": body["sessionKey"], **fields}

    def fields(self) -> dict[str, Any]:
        """The metadata fields given, by their wire names (a null one: to be cleared)."""
        out = self.model_dump(by_alias=True, exclude_unset=True)
        del out["sessionKey"]
        return out


class AppendParams(Params):
    """Transcript events to store under a session key (all or nothing)."""

    session_key: SessionKey = required(description=KEY_HELP)
    session_id: Id = Field(None, description="the window the events belong to (a new one starts a new window)")
    events: Events = required(description=f"transcript rows in the gateway's format, at most {MAX_EVENTS_PER_APPEND}")

    @classmethod
    def check_body(cls, body: dict[str, Any]) -> dict[str, Any]:
        if "events" not in body:
            raise InvalidRequest("events is required", field="events")
        return body


class RotateParams(Params):
    """Start a new window of a session (the key stays)."""

    session_key: SessionKey = required(description=KEY_HELP)
    session_id: Id = Field(None, description="the new window's id (default: a fresh one)")
    reason: Text = Field(None, description="why (checked, not stored)")


class SessionRef(Params):
    """One session, by its key: what delete, archive and restore take."""

    session_key: SessionKey = required(description=KEY_HELP)


class UpsertResult(TypedDict):
    sessionKey: str
    created: bool


class AppendResult(TypedDict):
    appended: int
    indexed: int
    needsReconcile: bool
    sessionId: NotRequired[str]
    duplicates: NotRequired[int]


class RotateResult(TypedDict):
    sessionKey: str
    sessionId: str
    previousSessionId: str | None


class DeleteResult(TypedDict):
    sessionKey: str
    deleted: Literal[True]


class ArchiveResult(TypedDict):
    sessionKey: str
    archivedWindows: int


class RestoreResult(TypedDict):
    sessionKey: str
    restoredWindows: int
