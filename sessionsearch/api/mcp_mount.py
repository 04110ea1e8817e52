"""`/mcp` on the web process, built on its first request.

Importing the MCP SDK costs over a second of CPU (its pydantic models), which a web process that
never serves MCP, or a test that starts dozens of them, need not pay. The first request imports it
off the event loop, builds the server and enters its session manager in a task that lives until
the app shuts down (the manager must be entered and left in one task).

Each request's body is read here first, up to the body limit, and screened (api/mcp_wire.py): what
JSON-RPC says deserves an error gets it here, in JSON-RPC's shape; the rest goes on to the SDK.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..auth import Caller
from ..engine import Engine
from .edge import CompactJSON, caller_of, error
from .mcp_wire import Refusal, screen, too_large

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


class LazyMCP:
    """An ASGI app answering `/mcp`; `lifespan()` must be entered for the app's lifetime."""

    def __init__(self, engine: Callable[[], Engine], *, max_body_bytes: int) -> None:
        self.engine = engine
        self.max_body_bytes = max_body_bytes
        self._handle: ASGIApp | None = None
        self._lock = anyio.Lock()
        self._tasks: TaskGroup | None = None

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()  # leaves the session manager, in the task that entered it
                self._tasks = None

    async def _build(self) -> ASGIApp:
        def build() -> StreamableHTTPSessionManager:
            from .mcp_server import build_mcp, http_manager

            server = build_mcp(self.engine, _caller)
            return http_manager(server, max_body_bytes=self.max_body_bytes)

        manager = await anyio.to_thread.run_sync(build)
        entered = anyio.Event()

        async def hold() -> None:
            async with manager.run():
                entered.set()
                await anyio.sleep_forever()

        assert self._tasks is not None, "LazyMCP.lifespan() is not entered"
        self._tasks.start_soon(hold)
        await entered.wait()
        return manager.handle_request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":  # stateless: no SSE stream to GET (which would hang), no session to DELETE
            message = (f"{scope['method']} is not allowed on /mcp; use POST (stateless streamable HTTP: "
                       "no SSE stream, no sessions)")
            await error(405, "INVALID_REQUEST", message, {"Allow": "POST"})(scope, receive, send)
            return
        body = await self._body(scope, receive, send)
        if body is None:
            return
        refusal = screen(body)
        if refusal is not None:
            await _answer(refusal)(scope, receive, send)
            return
        if self._handle is None:
            async with self._lock:
                if self._handle is None:
                    self._handle = await self._build()
        given = False

        async def replay() -> Message:
            """The body read above, then what the client sends next (a disconnect)."""
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self._handle(scope, replay, send)

    async def _body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole request body, or None once a body past the limit was answered (413, JSON-RPC's
        shape) or the client left. The Guard in front drops what the client still sends."""
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await _answer(too_large(self.max_body_bytes))(scope, receive, send)
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _answer(too_large(self.max_body_bytes))(scope, receive, send)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _answer(refusal: Refusal) -> Response:
    if not refusal.body:  # a notification: accepted, nothing to say
        return Response(status_code=202)
    return CompactJSON(refusal.body, status_code=refusal.status)


def _caller(ctx: Any) -> Caller:
    """Who sent this MCP request over HTTP: the caller the Guard left in its scope."""
    request = ctx.request_context.request
    if request is None:  # only the stdio transport has no request, and it never mounts here
        raise RuntimeError("an MCP request over HTTP without its HTTP request")
    return caller_of(request.scope)
