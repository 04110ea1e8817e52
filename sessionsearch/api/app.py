"""The HTTP API: `POST /v1/<method>` onto the engine, the agent tools, metrics, health, OpenAPI.

Errors are mapped from the error tree to status codes here and nowhere else. A token, when
configured, is required on every route but the health probes and the Control UI's static page (edge.Guard,
before the routes). The handlers are module-level; what they share lives on `app.state`: the
settings and credentials from `create_app`, and the engine, pipeline and gauge registry from the
lifespan (`engine` is None until it has started).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import structlog
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .. import gcpause, metrics
from ..auth import Credentials, bind_requester
from ..engine import Engine
from ..errors import Conflict, Forbidden, InvalidRequest, NotFound, SearchTimeout, SessionSearchError, Unavailable
from ..settings import Settings
from ..worker.embed_sweep import EmbedSweeps
from ..worker.optimize import PeriodicOptimize
from .edge import BadBody, CompactJSON, Guard, caller_of, decode_object, error
from .mcp_mount import LazyMCP
from .openapi import METHODS, openapi_document
from .readiness import Readiness
from .tools import AGENT_TOOLS, call, run_tool
from .ui import PAGE_PATHS, UI_ROUTES

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ..queue import Pipeline

log = structlog.get_logger("sessionsearch.api")

STATUS: dict[type[SessionSearchError], int] = {
    Conflict: 409, InvalidRequest: 400,  # the subclass first: the first match wins
    Forbidden: 403, NotFound: 404, SearchTimeout: 504, Unavailable: 503}


def error_response(exc: SessionSearchError) -> CompactJSON:
    status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 500)
    code = exc.code if status != 500 else "INTERNAL"
    return CompactJSON({"error": {"code": code, "message": exc.message}}, status_code=status)


def _shown(path: str) -> str:
    """A path or a name as an error message repeats it: cut short, so a long one is not sent back whole."""
    return path if len(path) <= 200 else path[:200] + "…"


# --- what the handlers share, on app.state ------------------------------------------------------

def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def _pipeline(request: Request) -> Pipeline:
    pipeline: Pipeline = request.app.state.pipeline
    return pipeline


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """The engine, queue and in-process worker, for the app's lifetime."""
    from prometheus_client import CollectorRegistry

    from ..queue import Pipeline

    settings: Settings = app.state.settings
    pipeline = Pipeline(settings)
    engine = Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue)
    await engine.open()
    engine.search_observer = metrics.get().observe_search
    optimizer = None
    embed_sweeps = None
    if pipeline.embedded:
        pipeline.start_embedded_worker()
        if settings.embedder != "none":
            embed_sweeps = EmbedSweeps(engine, every_s=settings.reconcile_sweep_every_s, first_now=app.state.sweep)
            embed_sweeps.start()
        loop = asyncio.get_running_loop()
        # the check is a few reads on this process's stores; each build runs in a child at idle priority
        # (normal when it catches up with an import: worker/optimize.py)
        optimizer = PeriodicOptimize(settings, due=lambda: asyncio.run_coroutine_threadsafe(
            engine.postings_due(), loop).result(timeout=60))
        optimizer.start()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics.PipelineCollector(engine.backend.agent_status, pipeline.queue_depth,
                                                embedding=settings.embedder != "none"))
    app.state.engine, app.state.pipeline, app.state.registry = engine, pipeline, registry
    if app.state.sweep:
        pending = {agent: set(wids) for agent, wids in (await engine.pending()).items() if wids}
        if pending and await engine.enqueue_reconcile(pending):
            log.info("api.sweep", windows=sum(len(w) for w in pending.values()))
    gcpause.settle()
    log.info("api.started", mode="embedded" if pipeline.embedded else "redis", store=engine.backend.describe())
    mcp: LazyMCP = app.state.mcp
    readiness = Readiness(engine, pipeline)
    await readiness.start()
    app.state.readiness = readiness
    try:
        async with mcp.lifespan():
            yield
    finally:
        app.state.readiness = None
        await readiness.stop()
        if embed_sweeps is not None:
            await embed_sweeps.stop()
        if optimizer is not None:
            await asyncio.to_thread(optimizer.stop)
        pipeline.close()
        await engine.close()
        log.info("api.stopped")


# --- routes ---------------------------------------------------------------------------------------

async def read_body(request: Request) -> dict[str, Any] | CompactJSON:
    """The request's JSON object, or the error answer (413 past the body limit, 400 for bad JSON)."""
    limit = _settings(request).max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return error(413, "INVALID_REQUEST", f"request body exceeds {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return error(413, "INVALID_REQUEST", f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    try:
        return decode_object(b"".join(chunks))
    except BadBody as exc:
        return exc.response


async def method(request: Request) -> Response:
    """`POST /v1/<method>`: one engine method, its errors mapped to status codes."""
    name = request.path_params["method"]
    if name not in METHODS:
        return error(404, "NOT_FOUND", f"unknown method {_shown(name)!r}")
    body = await read_body(request)
    if isinstance(body, Response):
        return body
    try:
        return CompactJSON(await call(_engine(request), name, body))
    except SessionSearchError as exc:
        return error_response(exc)
    except Exception:
        log.exception("api.failed", method=name)
        return error(500, "INTERNAL", "internal error; the server log has the details")


async def tool(request: Request) -> Response:
    """The agent-facing tools: denials and errors in the body, never as HTTP errors; but a scoped
    token's body that names another requester is refused (403) as any wrong credential is."""
    name = request.path_params["tool"]
    if name not in AGENT_TOOLS:
        return error(404, "NOT_FOUND", f"unknown tool {_shown(name)!r}")
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
    return CompactJSON(await run_tool(_engine(request), name, body, caller))


async def healthz(request: Request) -> Response:
    return CompactJSON({"status": "ok"})


async def readyz(request: Request) -> Response:
    """The background check's latest outcome (readiness.py): answered at once, whatever the load."""
    readiness: Readiness | None = request.app.state.readiness
    if readiness is None:
        return CompactJSON({"status": "unavailable", "reason": "starting"}, status_code=503)
    status, body = readiness.answer()
    return CompactJSON(body, status_code=status)


async def metrics_endpoint(request: Request) -> Response:
    own, content_type = metrics.exposition(metrics.process_registry())
    # off the event loop: the gauges read every agent database and ask Redis for the queue depth
    # (up to the request timeout; while Redis does not answer, queue_up is 0 and the depth is absent)
    registry: CollectorRegistry = request.app.state.registry
    pipeline_gauges, _ = await asyncio.to_thread(metrics.exposition, registry)
    return Response(own + pipeline_gauges, media_type=content_type)


async def openapi(request: Request) -> Response:
    credentials: Credentials = request.app.state.credentials
    return CompactJSON(openapi_document(token=credentials.required))


class MCPDoor:
    """`/mcp`: the app's LazyMCP (an ASGI app of its own, so not a request handler)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        mcp: LazyMCP = scope["app"].state.mcp
        await mcp(scope, receive, send)


ROUTES = [
    Route("/v1/tools/{tool}", tool, methods=["POST"]),
    Route("/v1/{method}", method, methods=["POST"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/metrics", metrics_endpoint, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
    *UI_ROUTES,
    Route("/mcp", MCPDoor()),
]


# --- errors no route answered ---------------------------------------------------------------------

async def not_found(request: Request, exc: Exception) -> Response:
    return error(404, "NOT_FOUND", f"no route {request.method} {_shown(request.url.path)}")


async def not_allowed(request: Request, exc: Exception) -> Response:
    # RFC 9110 says a 405 names what the route takes; Starlette's set has no order of its own
    allow = ", ".join(sorted((getattr(exc, "headers", None) or {}).get("Allow", "").split(", ")))
    message = f"{request.method} is not allowed on {_shown(request.url.path)}; use {allow}"
    return error(405, "INVALID_REQUEST", message, {"Allow": allow})


async def crashed(request: Request, exc: Exception) -> Response:
    log.exception("api.crashed", path=request.url.path)
    return error(500, "INTERNAL", "internal error; the server log has the details")


EXCEPTION_HANDLERS = {404: not_found, 405: not_allowed, 500: crashed}


def create_app(settings: Settings | None = None, *, sweep: bool = True) -> Starlette:
    """The ASGI app; the engine, queue and in-process worker live for the app's lifespan.

    `sweep` enqueues, once started, every window still needing reconciliation (the demo turns it
    off so that its first search is the one that meets the imported sessions).
    """
    settings = settings or Settings.load()
    credentials = Credentials(settings.api_token, settings.auth_tokens)
    app = Starlette(routes=ROUTES, lifespan=lifespan,
                    middleware=[Middleware(Guard, credentials=credentials, public=PAGE_PATHS)],
                    exception_handlers=EXCEPTION_HANDLERS)
    app.state.settings, app.state.credentials, app.state.sweep = settings, credentials, sweep
    app.state.engine = app.state.pipeline = app.state.registry = app.state.readiness = None
    app.state.mcp = LazyMCP(lambda: app.state.engine, max_body_bytes=settings.max_body_bytes)
    return app
