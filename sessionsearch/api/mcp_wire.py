"""MCP messages as they arrive, checked before the SDK sees them, on both transports.

The SDK drops what it cannot parse on stdio without an answer, takes a request whose `id` is null
or an object for a notification (HTTP 202, nothing on stdio), echoes a method name whole in its
"Method not found", and answers a body past its limit in text/plain. JSON-RPC 2.0 says what each
should get instead, and `screen` gives it: -32700 for a message that is not JSON, -32600 for one
that is not a request JSON-RPC allows (an array, an id that is neither a string nor a number), and
-32601 for a method name past MAX_METHOD_CHARS, cut when repeated. Everything else goes on to the
SDK as it came.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

import anyio

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND = -32700, -32600, -32601
MAX_METHOD_CHARS = 200  # longer than any MCP method; a longer name is not one, and is not sent back whole
MAX_DETAIL_CHARS = 200  # of a parser's message repeated in an error


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def rpc_error(code: int, message: str, request_id: Any = None, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response (`id` null when the request's could not be read)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


@dataclass(frozen=True)
class Refusal:
    """The answer to a message the SDK is not given: its HTTP status and JSON-RPC error."""

    status: int
    body: dict[str, Any]

    def line(self) -> str:
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":"))


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def screen(raw: bytes | str) -> Refusal | None:
    """Why this message gets an error instead of going to the SDK, else None."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        message = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Refusal(400, rpc_error(PARSE_ERROR, f"Parse error: {cut(str(exc), MAX_DETAIL_CHARS)}"))
    if not isinstance(message, dict):
        return Refusal(400, rpc_error(INVALID_REQUEST, "Invalid Request: a message is one JSON object "
                                                       "(batches are not part of MCP)"))
    if "method" not in message:
        return None  # a response to the server, or not JSON-RPC at all: the SDK answers those
    method = message["method"]
    request_id = message.get("id")
    if "id" in message and not _valid_id(request_id):
        return Refusal(400, rpc_error(INVALID_REQUEST, "Invalid Request: id must be a string or a number "
                                                       "(leave it out for a notification)"))
    if not isinstance(method, str):
        return Refusal(400, rpc_error(INVALID_REQUEST, "Invalid Request: method must be a string", request_id))
    if len(method) > MAX_METHOD_CHARS:
        if "id" not in message:
            return Refusal(202, {})  # a notification: nothing is answered, and nothing of it is kept
        return Refusal(200, rpc_error(METHOD_NOT_FOUND, "Method not found", request_id, cut(method, MAX_METHOD_CHARS)))
    return None


def too_large(limit: int) -> Refusal:
    return Refusal(413, rpc_error(INVALID_REQUEST, f"Invalid Request: request body exceeds {limit} bytes"))


# how long the end of stdin waits for answers still owed: past the search's own 60 s budget
DRAIN_SECONDS = 75


async def stdio_lines(server: Any) -> None:
    """Serve `server` (an MCPServer) on stdin/stdout, one JSON-RPC message a line, every line screened:
    one refused is answered here, the others go to the SDK's session as its own stdio transport
    passes them; blank lines are skipped. At the end of stdin every request already handed to the SDK
    is answered before the session ends (`printf '…' | sessionsearch mcp` gets all its answers: the
    SDK's session alone would cancel those still running)."""
    import mcp_types as types
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import SessionMessage

    lowlevel = server._lowlevel_server
    read_send, read_receive = create_context_streams[SessionMessage | Exception](0)
    write_send, write_receive = create_context_streams[SessionMessage](0)
    stdin = anyio.wrap_file(sys.stdin.buffer)
    stdout = anyio.wrap_file(sys.stdout.buffer)
    unanswered: set[Any] = set()  # ids of requests the SDK has and has not answered yet
    answered = anyio.Event()

    async def write(text: str) -> None:
        await stdout.write(text.encode("utf-8") + b"\n")
        await stdout.flush()

    async def reader() -> None:
        nonlocal answered
        async with read_send:
            async for raw in stdin:
                if not raw.strip():
                    continue
                refusal = screen(raw)
                if refusal is not None:
                    if refusal.body:
                        await write_send.send(SessionMessage(types.jsonrpc_message_adapter.validate_python(
                            refusal.body)))
                    continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(raw, by_name=False)
                except ValueError:
                    found = json.loads(raw)
                    await write_send.send(SessionMessage(types.jsonrpc_message_adapter.validate_python(rpc_error(
                        INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message MCP knows",
                        found.get("id") if _valid_id(found.get("id")) else None))))
                    continue
                if isinstance(message, types.JSONRPCRequest):
                    unanswered.add(message.id)
                await read_send.send(SessionMessage(message))
            with anyio.move_on_after(DRAIN_SECONDS):
                while unanswered:
                    await answered.wait()
                    answered = anyio.Event()

    async def writer() -> None:
        async with write_receive:
            async for session_message in write_receive:
                await write(session_message.message.model_dump_json(by_alias=True, exclude_unset=True))
                if isinstance(session_message.message, types.JSONRPCResponse | types.JSONRPCError):
                    unanswered.discard(session_message.message.id)
                    answered.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(writer)
        async with anyio.create_task_group() as reading:
            reading.start_soon(reader)
            await lowlevel.run(read_receive, write_send, lowlevel.create_initialization_options())
            reading.cancel_scope.cancel()  # the session ended: stop reading, then write what is left
        await write_send.aclose()
