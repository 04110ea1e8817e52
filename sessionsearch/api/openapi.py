"""The OpenAPI document of the HTTP API (served at /openapi.json), written to match the validators.

Each request schema accepts what the method accepts and refuses what it refuses (schemathesis
checks both ways): `null` stands for an absent optional field, unknown fields are refused, and
an empty body reads as `{}`, so a body is required exactly where the method has a required field.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from .. import __version__
from ..search.query import MAX_LIMIT, MAX_QUERIES, MAX_QUERY_UNITS, MAX_SESSION_KEYS
from ..search.timerange import ISO_PATTERN
from ..transcript.events import EVENT_TYPES, MAX_TS_MS, MIN_TS_MS, RESET_REASONS, ROLES, TEXT_BLOCKS

# The end of the text: `$` in a pattern also matches before a final newline in Python's re, which
# schema tools use, and would let "main\n" pass for an agent id.
END = "(?![\\s\\S])"


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


STRING = {"type": "string"}
# keys, ids, labels and roles are stored as columns: a NUL (U+0000) in one is refused (values.py)
NO_NUL = f"^[^\\x00]*{END}"
ID = {"type": "string", "minLength": 1, "pattern": NO_NUL}
NAME = {"type": ["string", "null"], "pattern": NO_NUL}
AGENT_ID = {"type": "string", "pattern": f"^[A-Za-z0-9_-]{{1,64}}{END}"}
SESSION_KEY = {"type": "string", "maxLength": 512,
               "pattern": "^(?![\\s\\S]*\\x00)(?:agent:[A-Za-z0-9_-]{1,64}:[\\s\\S]|(?!agent:)[\\s\\S]*\\S)",
               "description": "agent:<agentId>:<rest>; a key without the prefix belongs to agent main"}
REQUESTER = {"type": "object", "additionalProperties": False, "required": ["sessionKey"],
             "properties": {"sessionKey": SESSION_KEY, "sandboxed": {"type": ["boolean", "null"]}}}
QUERY = {"type": "string", "maxLength": MAX_QUERY_UNITS, "pattern": "[^\\s\\x00-\\x1f\\x7f-\\x9f]",
         "description": "literal words, all of which must match (control characters separate words); "
                        f"at most {MAX_QUERY_UNITS} UTF-16 units"}
BOOLEAN = {"type": ["boolean", "null"]}  # every boolean of a request is optional
NULLABLE_STRING = {"type": ["string", "null"]}


def _limit(maximum: int) -> dict[str, Any]:
    return _nullable({"type": "integer", "minimum": 1, "maximum": maximum})


EPOCH_MS = {"type": "number", "minimum": MIN_TS_MS, "maximum": MAX_TS_MS}
INSTANT: dict[str, Any] = {"anyOf": [{"type": "integer", "minimum": MIN_TS_MS, "maximum": MAX_TS_MS},
                     {"type": "string", "pattern": ISO_PATTERN}],
           "description": "epoch milliseconds, or an ISO 8601 date (midnight UTC) or date and time (Z, an offset, "
                          "or none for UTC)"}
BLOCK = {"type": "object", "required": ["type"], "properties": {"type": STRING},
         "if": {"properties": {"type": {"enum": sorted(TEXT_BLOCKS)}}},
         "then": {"required": ["text"], "properties": {"text": STRING}}}
# the indexer reads `content` when it is a string, else `text` when that is, else the content blocks
MESSAGE_IN = {"type": "object", "required": ["role"],
              "properties": {"role": {"type": "string", "minLength": 1, "pattern": NO_NUL, "examples": sorted(ROLES)},
                             "timestamp": _nullable({"anyOf": [EPOCH_MS, STRING]})},
              "anyOf": [{"required": ["text"], "properties": {"text": STRING}},
                        {"properties": {"content": {"anyOf": [NULLABLE_STRING,
                                                              {"type": "array", "items": BLOCK}]}}}]}


def _when(event_type: str, then: dict[str, Any]) -> dict[str, Any]:
    return {"if": {"properties": {"type": {"const": event_type}}}, "then": then}


EVENT = {"type": "object", "required": ["type"], "description": "a transcript row in the gateway's format",
         "properties": {"type": {"enum": sorted(EVENT_TYPES)}, "id": NAME, "parentId": NAME,
                        "appendMode": {"enum": ["side", None]},
                        "timestamp": _nullable({"anyOf": [EPOCH_MS, {"type": "string", "format": "date-time"}]})},
         "allOf": [_when("message", {"required": ["message"], "properties": {"message": MESSAGE_IN}}),
                   _when("leaf", {"required": ["targetId"], "properties": {"targetId": ID}}),
                   _when("reset", {"properties": {"firstKeptEntryId": NAME,
                                                  "reason": {"enum": [*sorted(RESET_REASONS), None]}}})]}

MODES = ("keyword", "semantic", "hybrid")
MEANING_MODES = ("semantic", "hybrid")  # the modes that read the meaning index (SPEC §4 `mode`)
HIT = {"type": "object", "required": ["sessionKey", "sessionId", "messageId", "role", "timestamp", "snippet", "score"],
       "properties": {"sessionKey": {"type": "string"}, "sessionId": {"type": "string"},
                      "messageId": {"type": "string"}, "role": {"enum": ["user", "assistant"]},
                      "timestamp": {"type": "integer"}, "snippet": {"type": "string"}, "score": {"type": "number"},
                      "matchedBy": {"type": "array", "minItems": 1, "maxItems": 2, "uniqueItems": True,
                                    "items": {"enum": ["keyword", "semantic"]},
                                    "description": "with mode semantic or hybrid: how the hit was found"}}}
SESSION_RESULT = {"type": "object", "required": ["sessionKey", "sessionId", "label", "hits", "best"],
                  "properties": {"sessionKey": {"type": "string"}, "sessionId": {"type": "string"},
                                 "label": NULLABLE_STRING, "hits": {"type": "integer", "minimum": 1}, "best": HIT}}
SEARCH_STATE = {"type": "object", "required": ["results"],
                "description": "results are hits, or with resultMode sessions one entry per session",
                "properties": {"results": {"type": "array", "maxItems": 25,
                                           "items": {"anyOf": [HIT, SESSION_RESULT]}},
                               "indexing": {"const": True}, "truncated": {"const": True},
                               "archivedTranscriptsExcluded": {"type": "integer", "minimum": 1},
                               "warning": {"type": "string"}}}
MESSAGE = {"type": "object", "required": ["messageId", "sessionId", "role", "content", "timestamp"],
           "properties": {"messageId": {"type": "string"}, "sessionId": {"type": "string"},
                          "role": {"type": "string"}, "content": {"type": ["string", "array", "null"]},
                          "timestamp": {"type": "integer"}}}


def _error(code: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["error"],
            "properties": {"error": {"type": "object", "required": ["code", "message"],
                                     "properties": {"code": code, "message": {"type": "string"}}}}}


ERROR = _error({"enum": ["INVALID_REQUEST", "FORBIDDEN", "NOT_FOUND", "TIMEOUT", "UNAVAILABLE", "UNAUTHORIZED",
                         "INTERNAL"]})


def _obj(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": list(required)}


SEARCH_REQUEST = {
    **_obj({"query": _nullable(QUERY),
            "queries": _nullable({"type": "array", "minItems": 1, "maxItems": MAX_QUERIES, "items": QUERY}),
            "agentId": _nullable(AGENT_ID),
            "sessionKeys": _nullable({"type": "array", "minItems": 1, "maxItems": MAX_SESSION_KEYS,
                                      "items": SESSION_KEY}),
            "sessionId": _nullable(ID), "role": {"enum": ["user", "assistant", None]}, "limit": _limit(MAX_LIMIT),
            "match": {"enum": ["exact", "prefix", None]}, "order": {"enum": ["relevance", "recent", None]},
            "palette": BOOLEAN, "requester": _nullable(REQUESTER),
            "since": _nullable({**INSTANT, "description": "hits at or after this time; " + INSTANT["description"]}),
            "until": _nullable({**INSTANT, "description": "hits before this time, which must be later than since; "
                                                          + INSTANT["description"]}),
            "resultMode": {"enum": ["messages", "sessions", None]},
            "mode": {"enum": [*MODES, None], "description": (
                "keyword (default): the words; semantic: the meaning of the query, no word needing to match; "
                "hybrid: both, fused by reciprocal rank")}}),
    # exactly one of them given, a null one being absent
    "oneOf": [{"required": ["query"], "properties": {"query": STRING}},
              {"required": ["queries"], "properties": {"queries": {"type": "array"}}}],
    # order "recent" is for keyword search only
    "not": {"required": ["order", "mode"],
            "properties": {"order": {"const": "recent"}, "mode": {"enum": list(MEANING_MODES)}}},
}
HISTORY_REQUEST = {
    **_obj({"sessionKey": SESSION_KEY, "limit": _limit(1000),
            "offset": _nullable({"type": "integer", "minimum": 0}), "messageId": _nullable(ID),
            "sessionId": _nullable(ID), "includeTools": BOOLEAN, "requester": _nullable(REQUESTER)}, ["sessionKey"]),
    "allOf": [  # a sessionId only beside a messageId; an offset never beside one
        {"if": {"required": ["sessionId"], "properties": {"sessionId": STRING}},
         "then": {"required": ["messageId"], "properties": {"messageId": STRING}}},
        {"not": {"required": ["offset", "messageId"],
                 "properties": {"offset": {"type": "number"}, "messageId": STRING}}}],
}
REQUESTS: dict[str, dict[str, Any]] = {
    "sessions.search": SEARCH_REQUEST,
    "sessions.history": HISTORY_REQUEST,
    "sessions.list": _obj({"agentId": _nullable(AGENT_ID), "search": NULLABLE_STRING,
                           "requester": _nullable(REQUESTER), "limit": _limit(1000),
                           "palette": BOOLEAN, "includeArchived": BOOLEAN}),
    "sessions.upsert": _obj({"sessionKey": SESSION_KEY, "sessionId": NAME, "label": NAME,
                             "displayName": NAME, "spawnedBy": _nullable(SESSION_KEY),
                             "parentSessionKey": _nullable(SESSION_KEY), "group": NAME,
                             "kind": {"enum": ["direct", "group", "subagent", "cron", "system", None]},
                             "incognito": BOOLEAN}, ["sessionKey"]),
    "transcript.append": _obj({"sessionKey": SESSION_KEY, "sessionId": _nullable(ID),
                               "events": {"type": "array", "maxItems": 10000, "items": EVENT}},
                              ["sessionKey", "events"]),
    "sessions.rotate": _obj({"sessionKey": SESSION_KEY, "sessionId": _nullable(ID), "reason": NULLABLE_STRING},
                            ["sessionKey"]),
    "sessions.delete": _obj({"sessionKey": SESSION_KEY}, ["sessionKey"]),
    "sessions.archive": _obj({"sessionKey": SESSION_KEY}, ["sessionKey"]),
    "sessions.restore": _obj({"sessionKey": SESSION_KEY}, ["sessionKey"]),
    "index.status": _obj({"agentId": _nullable(AGENT_ID)}),
}
BODY_REQUIRED = {name: bool(schema["required"]) or "oneOf" in schema for name, schema in REQUESTS.items()}

# where a reset falls among the returned messages (history.py's _reset_marks)
RESET_MARK = {"type": "object", "required": ["resetId", "afterMessageId", "beforeMessageId"],
              "properties": {"resetId": {"type": "string"}, "afterMessageId": NULLABLE_STRING,
                             "beforeMessageId": NULLABLE_STRING}}

LISTED_SESSION = {
    "type": "object", "required": ["sessionKey", "sessionId", "label", "displayName", "kind", "group", "spawnedBy",
                                   "updatedAt", "archived"],
    "properties": {"sessionKey": {"type": "string"}, "sessionId": NULLABLE_STRING, "label": NULLABLE_STRING,
                   "displayName": NULLABLE_STRING, "kind": NULLABLE_STRING, "group": NULLABLE_STRING,
                   "spawnedBy": NULLABLE_STRING, "parentSessionKey": NULLABLE_STRING,
                   "updatedAt": {"type": "integer"}, "archived": {"type": "boolean"}}}
RESPONSES: dict[str, dict[str, Any]] = {
    "sessions.search": {"oneOf": [SEARCH_STATE, {"type": "object", "required": ["states"],
                                                 "properties": {"states": {"type": "array", "items": SEARCH_STATE}}}]},
    "sessions.history": {"type": "object", "required": ["sessionKey", "messages", "truncated", "totalMessages"],
                         "properties": {"sessionKey": {"type": "string"}, "sessionId": NULLABLE_STRING,
                                        "messages": {"type": "array", "items": MESSAGE},
                                        "truncated": {"type": "boolean"}, "totalMessages": {"type": "integer"},
                                        "offset": {"type": "integer"}, "nextOffset": {"type": "integer"},
                                        "hasMore": {"type": "boolean"}, "anchorMessageId": {"type": "string"},
                                        "hasOlder": {"type": "boolean"}, "hasNewer": {"type": "boolean"},
                                        "resets": {"type": "array", "items": RESET_MARK}}},
    "sessions.list": {"type": "object", "required": ["sessions"],
                      "properties": {"sessions": {"type": "array", "items": LISTED_SESSION},
                                     "truncated": {"type": "boolean"}}},
    "sessions.upsert": {"type": "object", "required": ["sessionKey", "created"],
                        "properties": {"sessionKey": {"type": "string"}, "created": {"type": "boolean"}}},
    "transcript.append": {"type": "object", "required": ["appended", "indexed", "needsReconcile"],
                          "properties": {"appended": {"type": "integer"}, "indexed": {"type": "integer"},
                                         "needsReconcile": {"type": "boolean"}, "sessionId": {"type": "string"},
                                         "duplicates": {"type": "integer"}}},
    "sessions.rotate": {"type": "object", "required": ["sessionKey", "sessionId", "previousSessionId"],
                        "properties": {"sessionKey": {"type": "string"}, "sessionId": {"type": "string"},
                                       "previousSessionId": NULLABLE_STRING}},
    "sessions.delete": {"type": "object", "required": ["sessionKey", "deleted"],
                        "properties": {"sessionKey": {"type": "string"}, "deleted": {"const": True}}},
    "sessions.archive": {"type": "object", "required": ["sessionKey", "archivedWindows"],
                         "properties": {"sessionKey": {"type": "string"}, "archivedWindows": {"type": "integer"}}},
    "sessions.restore": {"type": "object", "required": ["sessionKey", "restoredWindows"],
                         "properties": {"sessionKey": {"type": "string"}, "restoredWindows": {"type": "integer"}}},
    "index.status": {"type": "object", "required": ["agents"], "properties": {"agents": {"type": "array", "items": {
        "type": "object", "required": ["agentId", "windows", "indexedWindows", "backlog", "messages", "indexedMessages",
                                       "completeness", "embeddedMessages", "embeddingBacklog"],
        "properties": {"agentId": {"type": "string"}, "windows": {"type": "integer"},
                       "indexedWindows": {"type": "integer"}, "backlog": {"type": "integer"},
                       "messages": {"type": "integer"}, "indexedMessages": {"type": "integer"},
                       "completeness": {"type": "number", "minimum": 0, "maximum": 1},
                       "embeddedMessages": {"type": "integer", "minimum": 0,
                                            "description": "messages with an embedding of the current model "
                                                           "(never an incognito session's)"},
                       "embeddingBacklog": {"type": "integer", "minimum": 0,
                                            "description": "messages waiting for one; an incognito session's "
                                                           "never wait (they are never embedded)"}}}}}},
}

METHODS = tuple(REQUESTS)
TOOL_STATUS = {"type": "object", "required": ["status", "error"],
               "properties": {"status": {"enum": ["forbidden", "error"]}, "error": {"type": "string"}}}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


READS = ("sessions.search", "sessions.history", "sessions.list")
ERROR_TEXT = {400: "invalid request",
              401: "missing or wrong bearer token (only from a server with a token configured)",
              403: "forbidden: by visibility, a cross-origin request, or a scoped token outside the agent tools",
              404: "no such session, agent or method", 409: "conflicts with what is stored",
              413: "request body too large",
              503: "a backing service is unavailable", 504: "timed out"}
HEALTH = {"type": "object", "required": ["status"], "properties": {"status": STRING, "mode": STRING, "reason": STRING}}
# what the token check (api/edge.py Guard) answers, before any route is looked up
UNAUTHORIZED = {"description": ERROR_TEXT[401],
                "headers": {"WWW-Authenticate": {"schema": {"const": "Bearer"}}},
                **_json(_error({"const": "UNAUTHORIZED"}))}
BEARER = {"type": "http", "scheme": "bearer", "description": (
    "SESSIONSEARCH_API_TOKEN, the operator's token, for every operation; or a scoped token ([[auth.tokens]] "
    "in the TOML config), bound to one requester, for the agent tools (/v1/tools/*) and /mcp only (403 "
    "elsewhere). A server with no token configured listens on loopback only and takes none.")}
INFO = ("The HTTP API of sessionsearch. Not described here: the Control UI (/ui, a page served without the "
        "token, which asks for it) and MCP's streamable HTTP (/mcp, the same bearer token).")


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): UNAUTHORIZED if c == 401 else {"description": ERROR_TEXT[c], **_json(ERROR)} for c in codes}


def _body(schema: dict[str, Any], required: bool) -> dict[str, Any]:
    return {"required": required, **_json(schema)}


@lru_cache(maxsize=2)
def openapi_document(*, token: bool = False) -> dict[str, Any]:
    """The document. Every operation but the health probes names the bearer scheme and its 401: with
    `token` (a token configured) it is required, without one it is optional (the server takes none)."""
    paths: dict[str, Any] = {}
    for name in METHODS:
        codes = [400, 401, 403, 404, 413, 503, 504] + ([] if name in READS else [409])
        paths[f"/v1/{name}"] = {"post": {
            "operationId": name.replace(".", "_"), "summary": name,
            "requestBody": _body(REQUESTS[name], BODY_REQUIRED[name]),
            "responses": {"200": {"description": "ok", **_json(RESPONSES[name])}, **_errors(*sorted(codes))},
        }}
    for tool, method in (("sessions_search", "sessions.search"), ("sessions_history", "sessions.history")):
        paths[f"/v1/tools/{tool}"] = {"post": {
            "operationId": f"tool_{tool}", "summary": f"agent tool {tool}: denials and errors in the body",
            "description": f"Any JSON object is taken: fields {method} refuses are answered 200 with "
                           "status error, a denial 200 with status forbidden.",
            "requestBody": _body({"type": "object", "description": f"the fields of {method}"}, False),
            "responses": {"200": {"description": "the tool's answer",
                                  **_json({"anyOf": [RESPONSES[method], TOOL_STATUS]})},
                          **_errors(400, 401, 403, 413)},
        }}
    paths["/healthz"] = {"get": {"operationId": "healthz", "security": [],
                                 "responses": {"200": {"description": "alive", **_json(HEALTH)}}}}
    paths["/readyz"] = {"get": {"operationId": "readyz", "security": [],
                                "responses": {"200": {"description": "ready", **_json(HEALTH)},
                                              "503": {"description": "not ready", **_json(HEALTH)}}}}
    paths["/metrics"] = {"get": {"operationId": "metrics", "responses": {
        "200": {"description": "Prometheus text format", "content": {"text/plain": {"schema": STRING}}},
        **_errors(401, 403)}}}
    paths["/openapi.json"] = {"get": {"operationId": "openapi", "responses": {
        "200": {"description": "this document", **_json({"type": "object"})}, **_errors(401, 403)}}}
    return {"openapi": "3.1.0", "info": {"title": "sessionsearch", "version": __version__, "description": INFO},
            "paths": paths, "components": {"securitySchemes": {"bearer": BEARER}},
            # an empty requirement makes the token optional
            "security": [{"bearer": []}] if token else [{"bearer": []}, {}]}
