"""What every request meets before a method sees it: the token, the JSON answer shape, the body's decoding."""

from __future__ import annotations

import ipaddress
import json
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..auth import OPERATOR, Caller, Credentials

# The probes a supervisor or load balancer calls without credentials; they tell nothing stored.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
# What a scoped token (bound to one requester) may call: the agent tools, over HTTP and MCP
SCOPED_PATHS = frozenset({"/mcp", "/mcp/"})
SCOPED_PREFIX = "/v1/tools/"
# Where the Guard leaves the caller in the ASGI scope for the routes (auth.Caller)
CALLER_KEY = "sessionsearch.caller"
# How much of a refused body is read and dropped so that the client sees the answer: eight times
# the default body limit, a few tenths of a second on a LAN, and never held in memory.
DISCARD_BYTES = 64 * 1024 * 1024

# The HTTP layer turns away only what json would choke on (it recurses out near 1,000 levels);
# below that each method's own checks answer and name the field (a transcript event, for one,
# may nest 100 levels), and no method accepts a body anywhere near this deep.
MAX_DEPTH = 512


class CompactJSON(JSONResponse):
    """UTF-8 JSON as the budgets count it: non-ASCII text is not escaped."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> CompactJSON:
    return CompactJSON({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


class BadBody(Exception):
    """Raised when a request body cannot become a JSON object; carries the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.response = error(status, "INVALID_REQUEST", message)


def _deeper_than(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def decode_object(raw: bytes) -> dict[str, Any]:
    """The JSON object a request body holds; an empty body is an empty object. Raises BadBody."""
    if not raw.strip():
        return {}
    too_deep = f"request body is nested more than {MAX_DEPTH} levels deep"
    try:  # decoded here: json.loads would take UTF-16 and UTF-32 too, which JSON on the wire is not
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadBody(400, f"request body is not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}") from None
    try:
        body = json.loads(text)
    except RecursionError:
        raise BadBody(400, too_deep) from None
    except ValueError as exc:
        raise BadBody(400, f"request body is not valid JSON: {exc}") from None
    # a body with few brackets cannot nest deeply: most bodies skip the walk
    if text.count("[") + text.count("{") > MAX_DEPTH and _deeper_than(body, MAX_DEPTH):
        raise BadBody(400, too_deep)
    if not isinstance(body, dict):
        raise BadBody(400, "request body must be a JSON object")
    return body


def is_loopback_name(name: str, *, subdomains: bool = True) -> bool:
    """Whether `name` (no port; an IPv6 address bare or in brackets) names this machine: localhost,
    127.0.0.0/8 or ::1, and with `subdomains` any `*.localhost` too (browsers resolve those to
    loopback themselves; a resolver asked to bind one may not)."""
    if name == "localhost" or (subdomains and name.endswith(".localhost")):
        return True
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_is_loopback(host: str) -> bool:
    """Whether a Host header names this machine, with any port."""
    if host.startswith("["):  # an IPv6 literal is always bracketed in Host
        name = host[1:host.find("]")] if "]" in host else host
    else:
        name = host.rpartition(":")[0] if ":" in host else host
    return is_loopback_name(name.lower())


def browser_refusal(headers: Headers, token_required: bool) -> str | None:
    """Why a request that a web page may have sent is refused, else None.

    A page on another origin can post to a loopback server without a CORS preflight (a form, or
    text/plain), and a name rebound to 127.0.0.1 makes a page look same-origin. Browsers name the
    page's origin in `Origin` on such requests, and send the page's own name as `Host`; gateways,
    scripts and curl send no `Origin`. With a token nothing is ambient, so nothing is checked.
    """
    if token_required:  # a page cannot attach the bearer token; behind a proxy Host is not the page's
        return None
    host = headers.get("host", "")
    origin = headers.get("origin")
    if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
        return f"cross-origin request refused: Origin {origin[:100]!r} is not this server ({host[:100]!r})"
    if host and not _host_is_loopback(host):
        return (f"Host {host[:100]!r} is not a loopback name: without SESSIONSEARCH_API_TOKEN the server "
                "answers only to 127.0.0.1, [::1] and localhost")
    return None


def caller_of(scope: Scope) -> Caller:
    """The caller the Guard identified for this request."""
    caller: Caller = scope.get(CALLER_KEY, OPERATOR)
    return caller


def scoped_path(path: str) -> bool:
    """Whether a token bound to a requester may call `path`."""
    return path in SCOPED_PATHS or path.startswith(SCOPED_PREFIX)


class Guard:
    """ASGI middleware before the routes: the token, and the rest of a body taken in before an answer.

    With a token configured, every path but the health probes and `public` needs one, unknown paths
    too (so that a caller without it learns nothing of the routes); a scoped token reaches only the
    agent tools and `/mcp`, and the caller it names is left in the scope (CALLER_KEY). An answer given
    before the body was read (401, 404, 405, 413) first reads and drops what the client is still sending, up to
    DISCARD_BYTES: most clients (urllib among them) send the whole body before they read, and a
    connection closed on unread data is reset, which loses the answer. Past that bound, or when the
    client waits for `100 Continue` before sending, the answer goes at once with `Connection: close`.
    """

    def __init__(self, app: ASGIApp, *, credentials: Credentials, public: frozenset[str] = frozenset()) -> None:
        """`public`: paths served without a token (the Control UI's static page, which asks for it)."""
        self.app = app
        self.credentials = credentials
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        ended = not ("transfer-encoding" in headers or declared not in ("", "0"))
        read = 0
        waiting = headers.get("expect", "").lower() == "100-continue"

        async def tracked() -> Message:
            nonlocal ended, read, waiting
            message = await receive()
            waiting = False
            read += len(message.get("body", b""))
            ended = ended or message["type"] == "http.disconnect" or not message.get("more_body", False)
            return message

        async def take_in_the_rest() -> bool:
            """Drop the unread body; False when it must be left unread (the connection then closes)."""
            if waiting or (declared.isdigit() and int(declared) - read > DISCARD_BYTES):
                return False
            start = read
            while not ended:
                await tracked()
                if read - start > DISCARD_BYTES:
                    return False
            return True

        async def answer(message: Message) -> None:
            if message["type"] == "http.response.start" and not ended and not await take_in_the_rest():
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        if scope["path"] not in OPEN_PATHS and scope["path"] not in self.public:
            refusal = browser_refusal(headers, self.credentials.required)
            if refusal is not None:
                await error(403, "FORBIDDEN", refusal)(scope, tracked, answer)
                return
            caller = self.credentials.identify(headers.get("authorization"))
            if caller is None:
                response = error(401, "UNAUTHORIZED", "a valid bearer token is required",
                                 {"WWW-Authenticate": "Bearer"})
                await response(scope, tracked, answer)
                return
            if caller.requester is not None and not scoped_path(scope["path"]):
                message = (f"this token is scoped to requester {caller.requester.session_key[:200]!r}: "
                           "it may call only the agent tools (POST /v1/tools/<name>) and /mcp")
                await error(403, "FORBIDDEN", message)(scope, tracked, answer)
                return
            scope = {**scope, CALLER_KEY: caller}
        await self.app(scope, tracked, answer)
