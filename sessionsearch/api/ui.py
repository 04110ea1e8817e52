"""The Control UI: `GET /ui` and its static files, and the pipeline figures its status view draws.

`GET /` redirects to `/ui`: a browser pointed at the bare address lands on the page rather than on
a 404, and it is open like the page it leads to.

The page and its assets load without a token (they hold nothing stored; the page asks for the
token when an API call answers 401) and carry a strict Content-Security-Policy: scripts, styles
and images from this server only, requests back to it only, no framing. Everything the page
shows comes from the token-guarded API: `/v1/*` and `GET /ui/status.json`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from .. import metrics
from .edge import CompactJSON, error

if TYPE_CHECKING:
    from ..engine import Engine
    from ..queue import Pipeline

STATIC = Path(__file__).resolve().parent / "static"
# the files the page is made of, by the name the page asks for; nothing else under /ui is served
ASSETS = {**{f"{name}.js": "text/javascript; charset=utf-8" for name in ("ui", "api", "dom", "status")},
          "ui.css": "text/css; charset=utf-8",
          "icon.svg": "image/svg+xml"}
PAGE_PATHS = frozenset({"/", "/ui", "/ui/", *(f"/ui/{name}" for name in ASSETS)})
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}
RECONCILED = "sessionsearch_reconciled_windows_total"


def _file(name: str, media_type: str) -> Response:
    return Response((STATIC / name).read_bytes(), media_type=media_type, headers=HEADERS)


def reconciled_windows() -> float:
    """Windows this process (or, in multiprocess mode, every process sharing its metrics directory)
    has reconciled since it started."""
    return sum(sample.value for family in metrics.process_registry().collect()
               for sample in family.samples if sample.name == RECONCILED)


async def page(request: Request) -> Response:
    return _file("index.html", "text/html; charset=utf-8")


async def root(request: Request) -> Response:
    # 307, not 308: a temporary redirect is not cached, so `/` stays free to answer otherwise later
    return RedirectResponse("/ui", status_code=307)


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        return error(404, "NOT_FOUND", f"no Control UI file {name[:100]!r}")
    return _file(name, ASSETS[name])


async def status(request: Request) -> Response:
    """Per-agent index status, the queue depth and the reconcile counter, in one answer.

    The engine and pipeline are the app's (`app.state`, api/app.py), set when it has started.
    """
    engine: Engine = request.app.state.engine
    pipeline: Pipeline = request.app.state.pipeline
    agents = (await engine.index_status())["agents"]
    try:  # off the event loop: Redis may take up to the request timeout to answer
        depth: dict[str, int] | None = await asyncio.to_thread(pipeline.queue_depth)
    except Exception:  # an unreachable queue is a state to show, not an error
        depth = None
    return CompactJSON({"time": int(time.time() * 1000), "mode": "embedded" if pipeline.embedded else "redis",
                        "agents": agents, "queue": {"up": depth is not None, "depth": depth or {}},
                        "reconciledWindows": int(reconciled_windows())},
                       headers={"Cache-Control": "no-store"})


UI_ROUTES = [Route("/", root, methods=["GET"]),
             Route("/ui", page, methods=["GET"]), Route("/ui/", page, methods=["GET"]),
             Route("/ui/status.json", status, methods=["GET"]),
             Route("/ui/{name}", asset, methods=["GET"])]
