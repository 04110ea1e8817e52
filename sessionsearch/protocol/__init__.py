"""One typed declaration per method: its request (a pydantic model, camelCase on the wire, snake_case
in Python) and its answer (a TypedDict of wire names). Every door is made from these: HTTP validation
and the OpenAPI document (api/openapi.py), the agent tools and MCP tool schemas (api/tools.py,
api/mcp_server.py), the CLI's search options (cli.py); the engine takes and returns them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Params
from .reads import (
    AgentStatus,
    HistoryParams,
    HistoryResult,
    ListedSession,
    ListParams,
    ListResult,
    Message,
    StatusParams,
    StatusResult,
)
from .search import Hit, SearchParams, SearchResult, SearchState, SearchStates, SessionHits, parse_search
from .sessions import (
    AppendParams,
    AppendResult,
    ArchiveResult,
    DeleteResult,
    RestoreResult,
    RotateParams,
    RotateResult,
    SessionRef,
    UpsertParams,
    UpsertResult,
)


@dataclass(frozen=True)
class Method:
    """One method of the HTTP API: its request, its answer's alternatives, the Engine method that runs it."""

    name: str
    params: type[Params]
    answers: tuple[Any, ...]
    engine_method: str
    reads: bool = False  # a read: never a conflict with what is stored (no 409)


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("sessions.search", SearchParams, (SearchState, SearchStates), "search", reads=True),
    Method("sessions.history", HistoryParams, (HistoryResult,), "history", reads=True),
    Method("sessions.list", ListParams, (ListResult,), "list_sessions", reads=True),
    Method("sessions.upsert", UpsertParams, (UpsertResult,), "upsert_session"),
    Method("transcript.append", AppendParams, (AppendResult,), "append"),
    Method("sessions.rotate", RotateParams, (RotateResult,), "rotate"),
    Method("sessions.delete", SessionRef, (DeleteResult,), "delete"),
    Method("sessions.archive", SessionRef, (ArchiveResult,), "archive"),
    Method("sessions.restore", SessionRef, (RestoreResult,), "restore"),
    Method("index.status", StatusParams, (StatusResult,), "index_status"),
)}

__all__ = ["METHODS", "AgentStatus", "AppendParams", "AppendResult", "ArchiveResult", "DeleteResult", "Hit",
           "HistoryParams", "HistoryResult", "ListParams", "ListResult", "ListedSession", "Message", "Method", "Params",
           "RestoreResult", "RotateParams", "RotateResult", "SearchParams", "SearchResult", "SearchState",
           "SearchStates", "SessionHits", "SessionRef", "StatusParams", "StatusResult", "UpsertParams", "UpsertResult",
           "parse_search"]
