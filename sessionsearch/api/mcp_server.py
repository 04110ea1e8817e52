"""The MCP server: `sessions_search`, `sessions_history` and `sessions_list` for any MCP client.

Two transports, one server: stdio (`sessionsearch mcp`, for clients that spawn a process) and
streamable HTTP at `/mcp` on the web process, stateless with JSON responses so that any web
process behind a load balancer can answer. The tools are the agent tools (api/tools.py): the
engine checks the arguments and names the field at fault, so the input schemas here describe,
they do not validate. Who asks comes from the connection: `--requester` on stdio, the token on
HTTP (a scoped token acts as its requester, the operator token as the operator).
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from typing import Any

import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict

from .. import __version__, gcpause
from ..auth import Caller
from ..engine import Engine
from ..protocol import METHODS
from ..protocol.schema import request_schema
from ..settings import Settings
from .mcp_wire import stdio_lines
from .tools import failed, run_tool

log = structlog.get_logger("sessionsearch.mcp")

INSTRUCTIONS = (
    "Search and read this agent gateway's past conversations (the user and assistant messages of the sessions "
    "you may see). Find where something was said with sessions_search (by its words, or with mode hybrid by "
    "what it was about), then read around a hit with "
    "sessions_history (pass the hit's sessionKey, sessionId and messageId). sessions_list finds conversations "
    "by title and gives their session keys. Answers with indexing: true are real but may be incomplete: "
    "search again shortly.")

SEARCH = (
    "Search past conversations you may see (user and assistant messages; tool output is not searched). Use it "
    "to find where something was said or decided. Pick mode by what you know: mode \"keyword\" (the default) "
    "for names, ids, numbers, error messages, quotes and exact phrases: `query` takes literal words and every "
    "word must appear in a message (case and accents do not matter; there are no operators: OR, quotes, * and "
    ": are plain text), so give a few distinctive words, not a sentence. mode \"hybrid\" for questions "
    "about a topic (\"what did we discuss about the move?\"): it finds messages by their words and by their "
    "meaning and ranks those found both ways first; a whole question is fine. mode \"semantic\" when the "
    "conversation may have used other words entirely (you ask about a \"home loan\", it said \"mortgage\"): "
    "by meaning only, no word needs to match, and a query with nothing close finds nothing. With semantic "
    "or hybrid each hit says matchedBy: [\"keyword\"], [\"semantic\"] or both. `queries` runs up to 8 "
    "searches in one call and answers {states: [one answer per query]}. Narrow with sessionKeys, agentId, "
    "sessionId, role, since/until (epoch ms or ISO 8601); order: \"recent\" puts the newest first (keyword "
    "mode only); match: \"prefix\" lets the last word match as a prefix; resultMode: \"sessions\" gives one "
    "entry per conversation (its best hit and hit count). Each hit has sessionKey, sessionId, messageId, "
    "role, timestamp and a snippet: pass the "
    "first three to sessions_history to read the conversation around the hit. indexing: true (with a warning) "
    "means some conversations in scope are still being indexed: the hits returned are real but others may be "
    "missing, so call sessions_search again in a few seconds before concluding that something was never said. "
    "truncated: true means more matches exist than were returned: narrow the search or raise limit (1..25, "
    "default 10). A denial answers {status: \"forbidden\", error}, a bad argument {status: \"error\", error} "
    "saying what to fix.")

HISTORY = (
    "Read the messages of one conversation (sessionKey), oldest first in each answer. With only sessionKey: "
    "its newest messages (limit, default 50, at most 1000); while hasMore, call again with offset: nextOffset "
    "for older ones. Around a search hit: pass sessionKey, messageId and the hit's sessionId (the window the "
    "hit is in, which may be an earlier window of that conversation); you get the hit and the messages around "
    "it. To read further back, call again with messageId set to the oldest message returned (while hasOlder); "
    "further forward, the newest one returned (while hasNewer). offset cannot be combined with messageId, and "
    "sessionId needs messageId. Tool calls and results appear only with includeTools: true. Text longer than "
    "4000 characters is cut. A denial answers {status: \"forbidden\", error}, a bad argument "
    "{status: \"error\", error}.")

LIST = (
    "List the conversations you may see, most recently active first: sessionKey, sessionId, label, "
    "displayName, kind, group, spawnedBy, updatedAt (epoch ms) and archived. Use it to discover session keys "
    "(to scope sessions_search, or to open one with sessions_history) or to find a conversation by its title "
    "with search (words of the label or display name, the last one may be a prefix; a literal session key "
    "finds its own session). It does not search message text: sessions_search does. limit: 1..1000, default "
    "100; includeArchived: false leaves archived conversations out.")

REQUESTER = (
    "Who is asking: {sessionKey, sandboxed}. Leave it out: the connection already says who you are. An "
    "operator connection may name a session to see only what that session may see; a connection bound to a "
    "session may name only its own.")

UI_ONLY = ("palette",)  # the Control UI's scope; not a model's concern


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A property schema without its `null` alternative: to the engine null and absent are the same, and
    a single `type` is what every client's schema dialect can read (the Inspector's --strict checks it)."""
    branches = [b for b in schema.get("anyOf", ()) if b != {"type": "null"}]
    if "anyOf" in schema and len(branches) == 1:
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        schema = {**branches[0], **rest}
    if isinstance(schema.get("type"), list):
        types = [t for t in schema["type"] if t != "null"]
        schema = {**schema, "type": types[0] if len(types) == 1 else types}
    if "enum" in schema:
        schema = {**schema, "enum": [v for v in schema["enum"] if v is not None]}
    if "properties" in schema:  # the requester's own fields
        schema = {**schema, "properties": {k: _without_null(v) for k, v in schema["properties"].items()}}
    return schema


def input_schema(method: str) -> dict[str, Any]:
    """The wire schema of `method` (its declaration's, described for a model), with no `null`
    alternatives and no top-level combinators (some model APIs refuse a tool schema with oneOf/allOf/not
    at the top; the engine answers those rules itself)."""
    schema = copy.deepcopy(request_schema(METHODS[method].params))
    for key in ("oneOf", "allOf", "anyOf", "not"):
        schema.pop(key, None)
    properties = {name: _without_null(prop) for name, prop in schema["properties"].items() if name not in UI_ONLY}
    schema["properties"] = properties
    if "requester" in properties:
        properties["requester"] = {**properties["requester"], "description": REQUESTER}
    return schema


class _Arguments(ArgModelBase):
    """The arguments exactly as the client sent them: the engine checks them and names the field at fault."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


def _answer(body: dict[str, Any]) -> CallToolResult:
    """An agent-facing answer as an MCP result: the JSON as text (what every client shows a model) and as
    structured content; denials and errors are marked as tool errors."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=body,
                          is_error=failed(body))


def build_mcp(engine: Callable[[], Engine], caller: Callable[[Context], Caller]) -> MCPServer:
    """The MCP server over the engine `engine()` returns, answering as `caller(ctx)` says."""
    annotations = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    tools = []
    for name, method, description in (("sessions_search", "sessions.search", SEARCH),
                                      ("sessions_history", "sessions.history", HISTORY),
                                      ("sessions_list", "sessions.list", LIST)):
        async def call(arguments: dict[str, Any], ctx: Context, _name: str = name) -> CallToolResult:
            return _answer(await run_tool(engine(), _name, arguments, caller(ctx)))

        tools.append(Tool(fn=call, name=name, title=None, description=description, parameters=input_schema(method),
                          fn_metadata=FuncMetadata(arg_model=_Arguments), is_async=True, context_kwarg="ctx",
                          annotations=annotations))
    return MCPServer("sessionsearch", instructions=INSTRUCTIONS, version=__version__, tools=tools)


def http_manager(server: MCPServer, *, max_body_bytes: int) -> StreamableHTTPSessionManager:
    """What answers `/mcp` on the web process: stateless, JSON responses. Requests go to its
    `handle_request` while its `run()` is entered. The Guard in front checks the token, Host and Origin."""
    # the SDK logs "Terminating session: None" at INFO after every stateless request: not an event here
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.WARNING)
    server.streamable_http_app(
        streamable_http_path="/mcp", json_response=True, stateless_http=True, max_request_body_size=max_body_bytes,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    return server.session_manager


async def serve_stdio(settings: Settings, caller: Caller) -> int:
    """`sessionsearch mcp`: the MCP server on stdin/stdout over the data dir and settings every command
    uses, with reconciliation as `serve` has it (Redis when configured, else an in-process worker)."""
    from ..queue import Pipeline

    pipeline = Pipeline(settings)
    engine = Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue)
    await engine.open()
    try:
        if pipeline.embedded:
            pipeline.start_embedded_worker()
        gcpause.settle()
        log.info("mcp.started", transport="stdio", operator=caller.operator, data_dir=settings.data_dir)
        await stdio_lines(build_mcp(lambda: engine, lambda ctx: caller))
    finally:
        pipeline.close()
        await engine.close()
    return 0
