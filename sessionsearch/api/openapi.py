"""The OpenAPI document of the HTTP API (served at /openapi.json), written to match the validators."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from .. import __version__

AGENT_ID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}
SESSION_KEY = {"type": "string", "minLength": 1, "maxLength": 512,
               "description": "agent:<agentId>:<rest>; a key without the prefix belongs to agent main"}
REQUESTER = {"type": "object", "additionalProperties": False, "required": ["sessionKey"],
             "properties": {"sessionKey": SESSION_KEY, "sandboxed": {"type": "boolean"}}}
QUERY = {"type": "string", "minLength": 1, "maxLength": 4096, "pattern": "\\S",
         "description": "literal words, all of which must match"}
NULLABLE_STRING = {"type": ["string", "null"]}
SESSION_FIELDS = {"label": NULLABLE_STRING, "displayName": NULLABLE_STRING, "spawnedBy": SESSION_KEY,
                  "parentSessionKey": SESSION_KEY, "group": NULLABLE_STRING,
                  "kind": {"enum": ["direct", "group", "subagent", "cron", "system"]},
                  "incognito": {"type": "boolean"}}

HIT = {"type": "object", "required": ["sessionKey", "sessionId", "messageId", "role", "timestamp", "snippet", "score"],
       "properties": {"sessionKey": {"type": "string"}, "sessionId": {"type": "string"},
                      "messageId": {"type": "string"}, "role": {"enum": ["user", "assistant"]},
                      "timestamp": {"type": "integer"}, "snippet": {"type": "string"}, "score": {"type": "number"}}}
SEARCH_STATE = {"type": "object", "required": ["results"],
                "properties": {"results": {"type": "array", "maxItems": 25, "items": HIT},
                               "indexing": {"const": True}, "truncated": {"const": True},
                               "archivedTranscriptsExcluded": {"type": "integer", "minimum": 1},
                               "warning": {"type": "string"}}}
MESSAGE = {"type": "object", "required": ["messageId", "sessionId", "role", "content", "timestamp"],
           "properties": {"messageId": {"type": "string"}, "sessionId": {"type": "string"},
                          "role": {"type": "string"}, "content": {"type": ["string", "array", "null"]},
                          "timestamp": {"type": "integer"}}}
ERROR = {"type": "object", "required": ["error"],
         "properties": {"error": {"type": "object", "required": ["code", "message"],
                                  "properties": {"code": {"enum": ["INVALID_REQUEST", "FORBIDDEN", "NOT_FOUND",
                                                                   "TIMEOUT", "UNAVAILABLE", "UNAUTHORIZED",
                                                                   "INTERNAL"]},
                                                 "message": {"type": "string"}}}}}


def _obj(properties: dict[str, Any], required: list[str] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": list(required)}


REQUESTS: dict[str, dict[str, Any]] = {
    "sessions.search": {
        **_obj({"query": QUERY, "queries": {"type": "array", "minItems": 1, "maxItems": 8, "items": QUERY},
                "agentId": AGENT_ID, "sessionKeys": {"type": "array", "minItems": 1, "maxItems": 200, "items": SESSION_KEY},
                "sessionId": {"type": "string", "minLength": 1}, "role": {"enum": ["user", "assistant"]},
                "limit": {"type": "integer", "minimum": 1, "maximum": 25},
                "match": {"enum": ["exact", "prefix"]}, "order": {"enum": ["relevance", "recent"]},
                "palette": {"type": "boolean"}, "requester": REQUESTER}),
        "oneOf": [{"required": ["query"]}, {"required": ["queries"]}],
    },
    "sessions.history": _obj({"sessionKey": SESSION_KEY, "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                              "offset": {"type": "integer", "minimum": 0}, "messageId": {"type": "string", "minLength": 1},
                              "sessionId": {"type": "string", "minLength": 1}, "includeTools": {"type": "boolean"},
                              "requester": REQUESTER}, ["sessionKey"]),
    "sessions.list": _obj({"agentId": AGENT_ID, "search": {"type": "string"}, "requester": REQUESTER,
                           "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                           "palette": {"type": "boolean"}, "includeArchived": {"type": "boolean"}}),
    "sessions.upsert": _obj({"sessionKey": SESSION_KEY, "sessionId": {"type": "string", "minLength": 1},
                             **SESSION_FIELDS}, ["sessionKey"]),
    "transcript.append": _obj({"sessionKey": SESSION_KEY, "sessionId": {"type": "string", "minLength": 1},
                               "events": {"type": "array", "maxItems": 10000,
                                          "items": {"type": "object", "required": ["type"],
                                                    "description": "a transcript row in the gateway's format"}}},
                              ["sessionKey", "events"]),
    "sessions.rotate": _obj({"sessionKey": SESSION_KEY, "sessionId": {"type": "string", "minLength": 1},
                             "reason": {"type": "string"}}, ["sessionKey"]),
    "sessions.delete": _obj({"sessionKey": SESSION_KEY}, ["sessionKey"]),
    "sessions.archive": _obj({"sessionKey": SESSION_KEY}, ["sessionKey"]),
    "sessions.restore": _obj({"sessionKey": SESSION_KEY}, ["sessionKey"]),
    "index.status": _obj({"agentId": AGENT_ID}),
}

RESPONSES: dict[str, dict[str, Any]] = {
    "sessions.search": {"oneOf": [SEARCH_STATE, {"type": "object", "required": ["states"],
                                                 "properties": {"states": {"type": "array", "items": SEARCH_STATE}}}]},
    "sessions.history": {"type": "object", "required": ["sessionKey", "messages", "truncated", "totalMessages"],
                         "properties": {"sessionKey": {"type": "string"}, "sessionId": NULLABLE_STRING,
                                        "messages": {"type": "array", "items": MESSAGE},
                                        "truncated": {"type": "boolean"}, "totalMessages": {"type": "integer"},
                                        "offset": {"type": "integer"}, "nextOffset": {"type": "integer"},
                                        "hasMore": {"type": "boolean"}, "anchorMessageId": {"type": "string"},
                                        "hasOlder": {"type": "boolean"}, "hasNewer": {"type": "boolean"}}},
    "sessions.list": {"type": "object", "required": ["sessions"], "properties": {"sessions": {"type": "array", "items": {
        "type": "object", "required": ["sessionKey", "sessionId", "label", "displayName", "kind", "group", "spawnedBy",
                                       "updatedAt", "archived"],
        "properties": {"sessionKey": {"type": "string"}, "sessionId": NULLABLE_STRING, "label": NULLABLE_STRING,
                       "displayName": NULLABLE_STRING, "kind": NULLABLE_STRING, "group": NULLABLE_STRING,
                       "spawnedBy": NULLABLE_STRING, "updatedAt": {"type": "integer"},
                       "archived": {"type": "boolean"}}}}}},
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
                                       "completeness"],
        "properties": {"agentId": {"type": "string"}, "windows": {"type": "integer"},
                       "indexedWindows": {"type": "integer"}, "backlog": {"type": "integer"},
                       "messages": {"type": "integer"}, "indexedMessages": {"type": "integer"},
                       "completeness": {"type": "number", "minimum": 0, "maximum": 1}}}}}},
}

METHODS = tuple(REQUESTS)
TOOL_STATUS = {"type": "object", "required": ["status", "error"],
               "properties": {"status": {"enum": ["forbidden", "error"]}, "error": {"type": "string"}}}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {400: "invalid request", 401: "missing or wrong bearer token", 403: "forbidden by visibility",
            404: "no such session, agent or method", 413: "request body too large",
            503: "a backing service is unavailable", 504: "search timed out"}
    return {str(c): {"description": text[c], **_json(ERROR)} for c in codes}


@lru_cache(maxsize=1)
def openapi_document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for name in METHODS:
        codes = [400, 401, 403, 404, 413, 503] + ([504] if name == "sessions.search" else [])
        paths[f"/v1/{name}"] = {"post": {
            "operationId": name.replace(".", "_"), "summary": name,
            "requestBody": {"required": True, **_json(REQUESTS[name])},
            "responses": {"200": {"description": "ok", **_json(RESPONSES[name])}, **_errors(*codes)},
        }}
    for tool, method in (("sessions_search", "sessions.search"), ("sessions_history", "sessions.history")):
        paths[f"/v1/tools/{tool}"] = {"post": {
            "operationId": f"tool_{tool}", "summary": f"agent tool {tool}: denials and errors in the body",
            "requestBody": {"required": True, **_json(REQUESTS[method])},
            "responses": {"200": {"description": "the tool's answer", **_json({"oneOf": [RESPONSES[method], TOOL_STATUS]})},
                          **_errors(400, 401, 413)},
        }}
    paths["/healthz"] = {"get": {"operationId": "healthz", "responses": {"200": {"description": "alive"}}}}
    paths["/readyz"] = {"get": {"operationId": "readyz", "responses": {"200": {"description": "ready"},
                                                                        "503": {"description": "not ready"}}}}
    paths["/metrics"] = {"get": {"operationId": "metrics", "responses": {
        "200": {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}},
        **_errors(401)}}}
    return {"openapi": "3.1.0", "info": {"title": "sessionsearch", "version": __version__},
            "paths": paths, "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
            "security": [{"bearer": []}, {}]}
