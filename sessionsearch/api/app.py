"""The HTTP API: `POST /v1/<method>` onto the engine, the agent tools, metrics, health, OpenAPI.

Errors are mapped from the error tree to status codes here and nowhere else. A token, when
configured, is required on every route but the health probes and the Control UI's static page (edge.Guard,
before the routes).
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.middleware import Middleware
from starlette.routing import Route

from .. import metrics
from ..auth import Credentials, bind_requester
from ..engine import Engine
from ..errors import Conflict, Forbidden, InvalidRequest, NotFound, SearchTimeout, SessionSearchError, Unavailable
from ..settings import Settings
from ..worker.optimize import PeriodicOptimize
from .edge import BadBody, CompactJSON, Guard, caller_of, decode_object
from .edge import error as _error  # the name the handlers below have always used
from .mcp_mount import LazyMCP
from .openapi import METHODS, openapi_document
from .ui import PAGE_PATHS, ui_routes
from .tools import AGENT_TOOLS, run_tool

log = structlog.get_logger("sessionsearch.api")

STATUS = {Conflict: 409, InvalidRequest: 400,  # the subclass first: the first match wins
          Forbidden: 403, NotFound: 404, SearchTimeout: 504, Unavailable: 503}


def error_response(exc: SessionSearchError) -> CompactJSON:
    status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 500)
    code = exc.code if status != 500 else "INTERNAL"
    return CompactJSON({"error": {"code": code, "message": exc.message}}, status_code=status)


def _shown(path: str) -> str:
    """A path as an error message repeats it: cut short, so a long one is not sent back whole."""
    return path if len(path) <= 200 else path[:200] + "…"


def create_app(settings: Settings | None = None, *, max_body_bytes: int | None = None,
               sweep: bool = True) -> Starlette:
    """The ASGI app; the engine, queue and in-process worker live for the app's lifespan.

    `sweep` enqueues, once started, every window still needing reconciliation (the demo turns it
    off so that its first search is the one that meets the imported sessions).
    """
    settings = settings or Settings.load()
    limit = max_body_bytes or settings.max_body_bytes
    credentials = Credentials(settings.api_token, settings.auth_tokens)
    state: dict[str, Any] = {}
    mcp = LazyMCP(lambda: state["engine"], max_body_bytes=limit)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        from prometheus_client import CollectorRegistry

        from ..queue import Pipeline

        pipeline = Pipeline(settings)
        engine = Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue)
        await engine.open()
        engine.search_observer = metrics.get().observe_search
        optimizer = None
        if pipeline.embedded:
            pipeline.start_embedded_worker()
            loop = asyncio.get_running_loop()
            # the check is a few reads on this process's stores; each build runs in a child at idle priority
            optimizer = PeriodicOptimize(settings, in_child=True, due=lambda: asyncio.run_coroutine_threadsafe(
                engine.postings_due(), loop).result(timeout=60))
            optimizer.start()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(metrics.PipelineCollector(engine.backend.agent_status, pipeline.queue_depth))
        state.update(engine=engine, pipeline=pipeline, registry=registry)
        if sweep:
            pending = {agent: set(wids) for agent, wids in (await engine.pending()).items() if wids}
            if pending and await engine.enqueue_reconcile(pending):
                log.info("api.sweep", windows=sum(len(w) for w in pending.values()))
        log.info("api.started", mode="embedded" if pipeline.embedded else "redis", store=engine.backend.describe())
        try:
            async with mcp.lifespan():
                yield
        finally:
            if optimizer is not None:
                await asyncio.to_thread(optimizer.stop)
            pipeline.close()
            await engine.close()
            log.info("api.stopped")

    async def read_body(request: Request) -> dict[str, Any] | CompactJSON:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return _error(413, "INVALID_REQUEST", f"request body exceeds {limit} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _error(413, "INVALID_REQUEST", f"request body exceeds {limit} bytes")
            chunks.append(chunk)
        try:
            return decode_object(b"".join(chunks))
        except BadBody as exc:
            return exc.response

    async def method(request: Request) -> Response:
        name = request.path_params["method"]
        if name not in METHODS:
            return _error(404, "NOT_FOUND", f"unknown method {name!r}")
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        try:
            return CompactJSON(await state["engine"].call(name, body))
        except SessionSearchError as exc:
            return error_response(exc)
        except Exception:
            log.exception("api.failed", method=name)
            return _error(500, "INTERNAL", "internal error; the server log has the details")

    async def tool(request: Request) -> Response:
        """The agent-facing tools: denials and errors in the body, never as HTTP errors; but a scoped
        token's body that names another requester is refused (403) as any wrong credential is."""
        name = request.path_params["tool"]
        if name not in AGENT_TOOLS:
            return _error(404, "NOT_FOUND", f"unknown tool {name!r}")
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        caller = caller_of(request.scope)
        try:
            bind_requester(body, caller)
        except Forbidden as exc:
            return error_response(exc)
        except SessionSearchError:
            pass  # a malformed requester: the tool answers it in its own shape
        return CompactJSON(await run_tool(state["engine"], name, body, caller))

    async def healthz(request: Request) -> Response:
        return CompactJSON({"status": "ok"})

    async def readyz(request: Request) -> Response:
        engine: Engine | None = state.get("engine")
        if engine is None:
            return CompactJSON({"status": "unavailable", "reason": "starting"}, status_code=503)
        try:
            await engine.check_ready()
        except SessionSearchError as exc:
            return CompactJSON({"status": "unavailable", "reason": exc.message}, status_code=503)
        pipeline = state["pipeline"]
        if not pipeline.embedded:
            try:  # off the event loop: the ping waits up to the request timeout on a hung Redis
                await asyncio.to_thread(pipeline.ping)
            except Exception as exc:  # any connection failure or timeout means not ready
                return CompactJSON({"status": "unavailable", "reason": f"redis unreachable: {exc}"}, status_code=503)
        return CompactJSON({"status": "ready", "mode": "embedded" if pipeline.embedded else "redis"})

    async def metrics_endpoint(request: Request) -> Response:
        own, content_type = metrics.exposition(metrics.process_registry())
        # off the event loop: the gauges read every agent database and ask Redis for the queue depth
        # (up to the request timeout; while Redis does not answer, queue_up is 0 and the depth is absent)
        pipeline_gauges, _ = await asyncio.to_thread(metrics.exposition, state["registry"])
        return Response(own + pipeline_gauges, media_type=content_type)

    async def openapi(request: Request) -> Response:
        return CompactJSON(openapi_document(token=credentials.required))

    routes = [
        Route("/v1/tools/{tool}", tool, methods=["POST"]),
        Route("/v1/{method}", method, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        *ui_routes(state, lambda: state["engine"].index_status()),
        Route("/mcp", mcp),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(404, "NOT_FOUND", f"no route {request.method} {_shown(request.url.path)}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        # RFC 9110 says a 405 names what the route takes; Starlette's set has no order of its own
        allow = ", ".join(sorted((getattr(exc, "headers", None) or {}).get("Allow", "").split(", ")))
        message = f"{request.method} is not allowed on {_shown(request.url.path)}; use {allow}"
        return _error(405, "INVALID_REQUEST", message, {"Allow": allow})

    async def crashed(request: Request, exc: Exception) -> Response:
        log.exception("api.crashed", path=request.url.path)
        return _error(500, "INTERNAL", "internal error; the server log has the details")

    return Starlette(routes=routes, lifespan=lifespan,
                     middleware=[Middleware(Guard, credentials=credentials, public=PAGE_PATHS)],
                     exception_handlers={404: not_found, 405: not_allowed, 500: crashed})
