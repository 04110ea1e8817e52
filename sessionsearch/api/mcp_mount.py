"""`/mcp` on the web process, built on its first request.

Importing the MCP SDK costs over a second of CPU (its pydantic models), which a web process that
never serves MCP, or a test that starts dozens of them, need not pay. The first request imports it
off the event loop, builds the server and enters its session manager in a task that lives until
the app shuts down (the manager must be entered and left in one task).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import anyio
from anyio.abc import TaskGroup
from starlette.types import ASGIApp, Receive, Scope, Send

from ..engine import Engine
from .edge import caller_of, error


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
        def build() -> Any:
            from .mcp_server import build_mcp, http_manager

            server = build_mcp(self.engine, lambda ctx: caller_of(ctx.request_context.request.scope))
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
        if self._handle is None:
            async with self._lock:
                if self._handle is None:
                    self._handle = await self._build()
        await self._handle(scope, receive, send)
