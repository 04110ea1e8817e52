"""The wire onto the engine: `call` runs one HTTP method on a JSON body; the agent tools, one
implementation for every door (`/v1/tools/*`, MCP over stdio and `/mcp`).

An agent-facing answer carries denials and errors in its body (`{"status": "forbidden"|"error",
"error": …}`), never as a transport error: the model reads them and can correct its call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from ..auth import Caller, bind_requester
from ..engine import Engine
from ..errors import Forbidden, NotFound, SessionSearchError
from ..protocol import METHODS, HistoryParams, ListParams, Params, SearchParams

log = structlog.get_logger("sessionsearch.tools")

AGENT_TOOLS = ("sessions_search", "sessions_history")  # at POST /v1/tools/<name>
MCP_TOOLS = (*AGENT_TOOLS, "sessions_list")


async def call(engine: Engine, method: str, body: object) -> Mapping[str, Any]:
    """Run the HTTP method `method` on a wire body: its declaration checks the body (InvalidRequest
    naming the field at fault), the engine method it names answers (its declared TypedDict)."""
    declared = METHODS.get(method)
    if declared is None:
        raise NotFound(f"unknown method {method!r}")
    run: Callable[[Params], Awaitable[Mapping[str, Any]]] = getattr(engine, declared.engine_method)
    return await run(declared.params.of(body))


def failed(body: dict[str, Any]) -> bool:
    """Whether an agent-facing answer is a denial or an error."""
    return body.get("status") in ("forbidden", "error")


async def run_tool(engine: Engine, name: str, body: dict[str, Any], caller: Caller) -> dict[str, Any]:
    """Run one tool as `caller` and answer in the agent-facing shape. `name` is one of MCP_TOOLS."""
    try:
        body = bind_requester(body, caller)
        async with engine.gate.admit(caller.requester):  # a scoped token's turn; the operator's at once
            if name == "sessions_search":
                limit = None if caller.operator else engine.settings.credential_search_time_limit_ms
                return dict(await engine.search(SearchParams.of(body), agent_facing=True, time_limit_ms=limit))
            if name == "sessions_history":  # a scoped token never writes
                return dict(await engine.history(HistoryParams.of(body), restore=caller.operator))
            if name == "sessions_list":
                return dict(await engine.list_sessions(ListParams.of(body)))
        raise ValueError(f"unknown tool {name!r}")
    except Forbidden as exc:
        return {"status": "forbidden", "error": exc.message}
    except SessionSearchError as exc:
        return {"status": "error", "error": exc.message}
    except Exception:
        log.exception("api.tool_failed", tool=name)
        return {"status": "error", "error": "internal error"}
