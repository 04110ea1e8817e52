"""`sessions.history`, `sessions.list` and `index.status`: their requests and answers."""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from pydantic import Field, PlainValidator, ValidationInfo, WithJsonSchema
from typing_extensions import TypedDict

from ..errors import InvalidRequest
from ..search.history import MAX_LIMIT as MAX_HISTORY_LIMIT
from ..search.history import HistoryRequest
from ..search.listing import CURSOR_PATTERN, Position, parse_cursor
from ..values import check_name
from .base import (
    ID_SCHEMA,
    AgentId,
    Flag,
    Params,
    RequesterField,
    Scope,
    SessionKey,
    Text,
    checked,
    integer,
    limit_schema,
    nullable,
    required,
    scope_excludes,
)

MAX_LIST_LIMIT = 1000
DEFAULT_LIST_LIMIT = 100


def _session_id(value: Any, info: ValidationInfo) -> str | None:
    session_id = check_name(value, "sessionId")
    if session_id is not None and info.data.get("message_id") is None:
        raise InvalidRequest("sessionId requires messageId", field="sessionId")
    return session_id


def _message_id(value: Any, info: ValidationInfo) -> str | None:
    message_id = check_name(value, "messageId")
    if message_id is not None and info.data.get("offset") is not None:
        raise InvalidRequest("offset and messageId cannot be used together", field="offset")
    return message_id


HistoryLimit = Annotated[int | None, checked(integer(1, MAX_HISTORY_LIMIT)),
                         WithJsonSchema(limit_schema(MAX_HISTORY_LIMIT))]
Offset = Annotated[int | None, checked(integer(0, None)), WithJsonSchema(nullable({"type": "integer", "minimum": 0}))]
Anchor = Annotated[str | None, PlainValidator(_message_id), WithJsonSchema(nullable(ID_SCHEMA))]
WindowId = Annotated[str | None, PlainValidator(_session_id), WithJsonSchema(nullable(ID_SCHEMA))]
Cursor = Annotated[Position | None, checked(lambda value, field: parse_cursor(value)), WithJsonSchema(nullable(
    {"type": "string", "pattern": CURSOR_PATTERN, "description": "an answer's nextCursor: the page after it"}))]
ListLimit = Annotated[int | None, checked(integer(1, MAX_LIST_LIMIT)), WithJsonSchema(limit_schema(MAX_LIST_LIMIT))]


class HistoryParams(Params):
    """Which conversation to read, and where: its newest messages, or the window around one."""

    SCHEMA_EXTRA = {"allOf": [  # a sessionId only beside a messageId; an offset never beside one
        {"if": {"required": ["sessionId"], "properties": {"sessionId": {"type": "string"}}},
         "then": {"required": ["messageId"], "properties": {"messageId": {"type": "string"}}}},
        {"not": {"required": ["offset", "messageId"],
                 "properties": {"offset": {"type": "number"}, "messageId": {"type": "string"}}}}]}

    session_key: SessionKey = required(description=(
        "the conversation's session key, agent:<agentId>:<rest> (a hit's sessionKey)"))
    limit: HistoryLimit = Field(None, description=f"how many messages (1..{MAX_HISTORY_LIMIT}, default 50)")
    offset: Offset = Field(None, description="skip this many of the newest messages (paging back without messageId)")
    message_id: Anchor = Field(None, description="read the messages around this one (a search hit's messageId)")
    session_id: WindowId = Field(None, description=(
        "the window (one transcript generation) the message is in: a hit's sessionId"))
    include_tools: Flag = Field(None, description="include tool calls and tool results")
    requester: RequesterField = Field(None, description="who asks: {sessionKey, sandboxed}; its visibility rules apply")

    def request(self, default_limit: int) -> HistoryRequest:
        """The read to run; `default_limit`: the setting history_default_limit."""
        limit = self.limit if self.limit is not None else min(default_limit, MAX_HISTORY_LIMIT)
        return HistoryRequest(self.session_key, limit, self.offset, self.message_id, self.session_id,
                              bool(self.include_tools), self.requester)


class ListParams(Params):
    """Which sessions to list: an agent's or all the caller may see, optionally by a title search."""

    SCHEMA_EXTRA = scope_excludes("agentId")

    agent_id: AgentId = Field(None, description="only this agent's conversations")
    scope: Scope = Field(None, description="the sessions the session list's filters select (not with agentId)")
    cursor: Cursor = Field(None, description="the previous page's nextCursor: the sessions after it")
    search: Text = Field(None, description="words of the conversation's label or display name; the last word may "
                                           "be a prefix")
    limit: ListLimit = Field(None, description=f"how many sessions (1..{MAX_LIST_LIMIT}, default {DEFAULT_LIST_LIMIT})")
    palette: Flag = Field(None, description="the Control UI's scope: the sessions its palette shows")
    include_archived: Flag = Field(None, description="include archived conversations (default true)")
    requester: RequesterField = Field(None, description="who asks: {sessionKey, sandboxed}; its visibility rules apply")


class StatusParams(Params):
    """Which agent's index to describe (every agent's when absent)."""

    agent_id: AgentId = Field(None, description="only this agent")


# --- the answers ---------------------------------------------------------------------------------------

class Message(TypedDict):
    messageId: str
    sessionId: str
    role: str
    content: str | list[Any] | None
    timestamp: int


class ResetMark(TypedDict):
    """Where a reset falls among the returned messages."""

    resetId: str
    afterMessageId: str | None
    beforeMessageId: str | None


class HistoryResult(TypedDict):
    sessionKey: str
    sessionId: NotRequired[str | None]
    messages: list[Message]
    truncated: bool
    totalMessages: int
    offset: NotRequired[int]
    nextOffset: NotRequired[int]
    hasMore: NotRequired[bool]
    anchorMessageId: NotRequired[str]
    hasOlder: NotRequired[bool]
    hasNewer: NotRequired[bool]
    resets: NotRequired[list[ResetMark]]


class ListedSession(TypedDict):
    sessionKey: str
    sessionId: str | None
    label: str | None
    displayName: str | None
    kind: str | None
    group: str | None
    spawnedBy: str | None
    parentSessionKey: NotRequired[str | None]
    updatedAt: int
    archived: bool


class ListResult(TypedDict):
    sessions: list[ListedSession]
    truncated: NotRequired[bool]
    nextCursor: NotRequired[Annotated[str, Field(description="while more sessions remain: send it as cursor")]]


class AgentStatus(TypedDict):
    agentId: str
    windows: int
    indexedWindows: int
    backlog: int
    messages: int
    indexedMessages: int
    completeness: Annotated[float, Field(ge=0, le=1)]
    embeddedMessages: Annotated[int, Field(ge=0, description=(
        "messages with an embedding of the current model (never an incognito session's)"))]
    embeddingBacklog: Annotated[int, Field(ge=0, description=(
        "messages waiting for one; an incognito session's never wait (they are never embedded)"))]


class StatusResult(TypedDict):
    agents: list[AgentStatus]


__all__ = ["AgentStatus", "HistoryParams", "HistoryResult", "ListParams", "ListResult", "ListedSession", "Message",
           "ResetMark", "StatusParams", "StatusResult"]
