"""The agent tools, one implementation for every door (`/v1/tools/*`, MCP over stdio and `/mcp`).

An agent-facing answer carries denials and errors in its body (`{"status": "forbidden"|"error",
"error": …}`), never as a transport error: the model reads them and can correct its call.
"""

from __future__ import annotations

from typing import Any

import structlog

from ..auth import Caller, bind_requester
from ..engine import Engine
from ..errors import Forbidden, SessionSearchError

log = structlog.get_logger("sessionsearch.tools")

AGENT_TOOLS = ("sessions_search", "sessions_history")  # at POST /v1/tools/<name>
MCP_TOOLS = (*AGENT_TOOLS, "sessions_list")


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
                return await engine.search(body, agent_facing=True, time_limit_ms=limit)
            if name == "sessions_history":
                return await engine.history(body, restore=caller.operator)  # a scoped token never writes
            if name == "sessions_list":
                return await engine.list_sessions(body)
        raise ValueError(f"unknown tool {name!r}")
    except Forbidden as exc:
        return {"status": "forbidden", "error": exc.message}
    except SessionSearchError as exc:
        return {"status": "error", "error": exc.message}
    except Exception:
        log.exception("api.tool_failed", tool=name)
        return {"status": "error", "error": "internal error"}
