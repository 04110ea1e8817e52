"""The OpenAPI document of the HTTP API (served at /openapi.json), made from the methods' declarations.

Each request schema accepts what the method accepts and refuses what it refuses (schemathesis
checks both ways): `null` stands for an absent optional field, unknown fields are refused, and
an empty body reads as `{}`, so a body is required exactly where the method has a required field.
The schemas come from protocol/ (protocol/schema.py); this module adds the paths, the errors and
the bearer scheme.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from .. import __version__
from ..protocol import METHODS as PROTOCOL
from ..protocol import Method
from ..protocol.schema import answer_schema, request_schema

STRING = {"type": "string"}


def _answer(method: Method) -> dict[str, Any]:
    alternatives = [answer_schema(answer) for answer in method.answers]
    return alternatives[0] if len(alternatives) == 1 else {"oneOf": alternatives}


def _error(code: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["error"],
            "properties": {"error": {"type": "object", "required": ["code", "message"],
                                     "properties": {"code": code, "message": {"type": "string"}}}}}


ERROR = _error({"enum": ["INVALID_REQUEST", "FORBIDDEN", "NOT_FOUND", "TIMEOUT", "UNAVAILABLE", "UNAUTHORIZED",
                         "INTERNAL"]})
REQUESTS: dict[str, dict[str, Any]] = {name: request_schema(method.params) for name, method in PROTOCOL.items()}
RESPONSES: dict[str, dict[str, Any]] = {name: _answer(method) for name, method in PROTOCOL.items()}
BODY_REQUIRED = {name: bool(schema["required"]) or "oneOf" in schema for name, schema in REQUESTS.items()}
METHODS = tuple(REQUESTS)
TOOL_STATUS = {"type": "object", "required": ["status", "error"],
               "properties": {"status": {"enum": ["forbidden", "error"]}, "error": {"type": "string"}}}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


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
        codes = [400, 401, 403, 404, 413, 503, 504] + ([] if PROTOCOL[name].reads else [409])
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
