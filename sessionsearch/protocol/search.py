"""`sessions.search`: its request and its answer.

The fields are declared in the order they are checked: a body with several faults is refused for
the first of them, as it always has been.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field, PlainValidator, ValidationInfo, WithJsonSchema
from typing_extensions import TypedDict

from ..errors import InvalidRequest
from ..identity import Requester
from ..keys import check_session_key
from ..search.query import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_QUERIES,
    MAX_QUERY_UNITS,
    MAX_SESSION_KEYS,
    SearchRequest,
    clean_query,
    query_words,
)
from ..search.timerange import parse_instant
from .base import (
    INSTANT_FORMS,
    INSTANT_SCHEMA,
    SESSION_KEY_SCHEMA,
    AgentId,
    Flag,
    Id,
    Instant,
    Params,
    RequesterField,
    Scope,
    checked,
    choice,
    enum_schema,
    integer,
    limit_schema,
    nullable,
    scope_excludes,
)
from .reads import ListedSession

MODES = ("keyword", "semantic", "hybrid")
MEANING_MODES = ("semantic", "hybrid")  # the modes that read the meaning index
QUERY_SCHEMA: dict[str, Any] = {
    "type": "string", "maxLength": MAX_QUERY_UNITS, "pattern": "[^\\s\\x00-\\x1f\\x7f-\\x9f]",
    "description": "literal words, all of which must match (control characters separate words); "
                   f"at most {MAX_QUERY_UNITS} UTF-16 units"}


def _mode(value: Any, info: ValidationInfo) -> str | None:
    mode = choice(*MODES, said='"keyword", "semantic" or "hybrid"')(value, "mode")
    if info.data.get("order") == "recent" and mode not in (None, "keyword"):
        raise InvalidRequest('order "recent" needs mode "keyword"', field="order")
    return mode


def _queries(value: Any, field: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_QUERIES:
        raise InvalidRequest(f"queries must be a list of 1 to {MAX_QUERIES} strings", field="queries")
    return [clean_query(q, where=f"queries[{i}]") for i, q in enumerate(value)]


def _query(value: Any, field: str) -> str | None:
    return None if value is None else clean_query(value)


def _session_keys(value: Any, field: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_SESSION_KEYS:
        raise InvalidRequest(f"sessionKeys must be a list of 1 to {MAX_SESSION_KEYS} session keys",
                             field="sessionKeys")
    return list(dict.fromkeys(check_session_key(k, field=f"sessionKeys[{i}]") for i, k in enumerate(value)))


def _until(value: Any, info: ValidationInfo) -> int | None:
    until = parse_instant(value, "until")
    since = info.data.get("since")
    if since is not None and until is not None and since >= until:
        raise InvalidRequest("since must be earlier than until", field="since")
    return until


Match = Annotated[Literal["exact", "prefix"] | None, checked(choice("exact", "prefix", said='"exact" or "prefix"')),
                  WithJsonSchema(enum_schema("exact", "prefix"))]
Order = Annotated[Literal["relevance", "recent"] | None,
                  checked(choice("relevance", "recent", said='"relevance" or "recent"')),
                  WithJsonSchema(enum_schema("relevance", "recent"))]
Mode = Annotated[Literal["keyword", "semantic", "hybrid"] | None, PlainValidator(_mode),
                 WithJsonSchema(enum_schema(*MODES))]
ResultMode = Annotated[Literal["messages", "sessions"] | None,
                       checked(choice("messages", "sessions", said='"messages" or "sessions"')),
                       WithJsonSchema(enum_schema("messages", "sessions"))]
Role = Annotated[Literal["user", "assistant"] | None,
                 checked(choice("user", "assistant", said='"user" or "assistant"')),
                 WithJsonSchema(enum_schema("user", "assistant"))]
Queries = Annotated[list[str] | None, checked(_queries), WithJsonSchema(nullable(
    {"type": "array", "minItems": 1, "maxItems": MAX_QUERIES, "items": QUERY_SCHEMA}))]
Query = Annotated[str | None, checked(_query), WithJsonSchema(nullable(QUERY_SCHEMA))]
SessionKeys = Annotated[list[str] | None, checked(_session_keys), WithJsonSchema(nullable(
    {"type": "array", "minItems": 1, "maxItems": MAX_SESSION_KEYS, "items": SESSION_KEY_SCHEMA}))]
Limit = Annotated[int | None, checked(integer(1, MAX_LIMIT)), WithJsonSchema(limit_schema(MAX_LIMIT))]
Until = Annotated[int | None, PlainValidator(_until), WithJsonSchema(nullable(INSTANT_SCHEMA))]


class SearchParams(Params):
    """What to search for and where: one query (`query`) or a batch (`queries`), the scope, the order."""

    SCHEMA_EXTRA = {
        # exactly one of them given, a null one being absent
        "oneOf": [{"required": ["query"], "properties": {"query": {"type": "string"}}},
                  {"required": ["queries"], "properties": {"queries": {"type": "array"}}}],
        # order "recent" is for keyword search only
        "not": {"required": ["order", "mode"],
                "properties": {"order": {"const": "recent"}, "mode": {"enum": list(MEANING_MODES)}}},
        # scope never beside agentId or sessionKeys
        "allOf": [scope_excludes("agentId", "sessionKeys")],
    }

    match: Match = Field(None, description="exact (default): whole words; prefix: the last word may be a prefix")
    order: Order = Field(None, description="relevance (default) or recent (newest first; keyword mode only)")
    mode: Mode = Field(None, description=(
        "keyword (default): exact words, for names, ids and quotes; hybrid: words and meaning, for "
        "\"what did we discuss about ...\" questions; semantic: meaning only, when the words may differ entirely"))
    result_mode: ResultMode = Field(None, description=(
        "messages (default): hits; sessions: one entry per conversation"))
    queries: Queries = Field(None, description=f"up to {MAX_QUERIES} queries answered at once (instead of query)")
    query: Query = Field(None, description=(
        "keyword mode: literal words, all of which must appear in a message; semantic or hybrid: a question or "
        f"description in your own words (at most {MAX_QUERY_UNITS} characters)"))
    agent_id: AgentId = Field(None, description="only this agent's conversations")
    session_keys: SessionKeys = Field(None, description=(
        f"only these conversations (1..{MAX_SESSION_KEYS} session keys, which may span agents)"))
    scope: Scope = Field(None, description=(
        "the sessions the session list's filters select, all of them however many (not with agentId or "
        "sessionKeys)"))
    session_id: Id = Field(None, description="a window (one transcript generation) of the conversation: a hit's "
                                             "sessionId")
    role: Role = Field(None, description="only messages of this role")
    palette: Flag = Field(None, description="the Control UI's scope: the sessions its palette shows")
    limit: Limit = Field(None, description=f"how many results (1..{MAX_LIMIT}, default {DEFAULT_LIMIT})")
    since: Instant = Field(None, description=f"hits at or after this time; {INSTANT_FORMS}")
    until: Until = Field(None, description=f"hits before this time, which must be later than since; {INSTANT_FORMS}")
    requester: RequesterField = Field(None, description="who asks: {sessionKey, sandboxed}; its visibility rules apply")

    @classmethod
    def check_body(cls, body: dict[str, Any]) -> dict[str, Any]:
        if (body.get("query") is None) == (body.get("queries") is None):
            raise InvalidRequest("give exactly one of query and queries", field="query")
        return body

    def request(self) -> SearchRequest:
        """The search to run: each query's words, the defaults filled in."""
        prefix = self.match == "prefix"
        texts = self.queries if self.queries is not None else [self.query or ""]
        return SearchRequest(
            [query_words(text, prefix=prefix) for text in texts], self.queries is not None, self.agent_id,
            self.session_keys, self.session_id, self.role, self.limit or DEFAULT_LIMIT, prefix,
            self.order or "relevance", self.requester, bool(self.palette), self.since, self.until,
            self.result_mode or "messages", self.mode or "keyword", self.scope)


def parse_search(body: object) -> SearchRequest:
    """A `sessions.search` wire body as the search to run; raises InvalidRequest naming the field at fault."""
    return SearchParams.of(body).request()


# --- the answer -------------------------------------------------------------------------------------

class Hit(TypedDict):
    sessionKey: str
    sessionId: str
    messageId: str
    role: Literal["user", "assistant"]
    timestamp: int
    snippet: str
    score: float
    matchedBy: NotRequired[Annotated[list[Literal["keyword", "semantic"]], Field(
        min_length=1, max_length=2, json_schema_extra={"uniqueItems": True},
        description="with mode semantic or hybrid: how the hit was found")]]


class SessionHits(TypedDict):
    """With resultMode sessions: one conversation's best hit and how many it has."""

    sessionKey: str
    sessionId: str
    label: str | None
    hits: Annotated[int, Field(ge=1)]
    best: Hit


class SearchState(TypedDict):
    """One query's answer: hits, or with resultMode sessions one entry per session."""

    results: Annotated[list[Hit | SessionHits], Field(max_length=MAX_LIMIT)]
    indexing: NotRequired[Literal[True]]
    truncated: NotRequired[Literal[True]]
    archivedTranscriptsExcluded: NotRequired[Annotated[int, Field(ge=1)]]
    warning: NotRequired[str]
    sessions: NotRequired[Annotated[list[ListedSession], Field(max_length=MAX_LIMIT, description=(
        "with scope: the session rows (as sessions.list gives them) of the sessions the hits come from, in hit "
        "order"))]]


class SearchStates(TypedDict):
    """A batch's answer: one state per query, in order."""

    states: list[SearchState]


SearchResult = SearchState | SearchStates
__all__ = ["Hit", "Requester", "SearchParams", "SearchResult", "SearchState", "SearchStates", "SessionHits",
           "parse_search"]
