"""The official MCP Inspector CLI (npm, a TypeScript client: not the SDK the server is built on) against
`sessionsearch mcp` over stdio and `/mcp` over HTTP. `make install` installs it under tests/node."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .test_mcp import MAIN, SCOPED_TOKEN, rewind_over_http, seed, start, stop

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
SESSIONSEARCH = str(Path(sys.executable).parent / "sessionsearch")


def inspector(*args: str) -> subprocess.CompletedProcess:
    """`npx @modelcontextprotocol/inspector --cli …` from the project's own install (never a download)."""
    if shutil.which("npx") is None or not (NODE_DIR / "node_modules" / ".bin" / "mcp-inspector").exists():
        pytest.fail("the MCP Inspector is not installed: run `make install` (npm ci in tests/node)")
    run = subprocess.run(["npx", "--no-install", "@modelcontextprotocol/inspector", "--cli", *args], cwd=NODE_DIR,
                         capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


async def test_the_inspector_lists_portable_tool_schemas_over_stdio(tmp_path):
    await seed(tmp_path / "data")
    run = inspector(SESSIONSEARCH, "mcp", "--data-dir", str(tmp_path / "data"), "--method", "tools/list", "--strict")
    assert sorted(t["name"] for t in json.loads(run.stdout)["tools"]) == [
        "sessions_history", "sessions_list", "sessions_search"]
    assert "Warning" not in run.stderr and "Error" not in run.stderr  # --strict names every portability problem


def test_the_inspector_calls_a_tool_over_http_with_a_scoped_token(tmp_path):
    srv = start(tmp_path)
    try:
        rewind_over_http(srv)
        run = inspector(f"{srv.url}/mcp", "--transport", "http", "--header", f"Authorization: Bearer {SCOPED_TOKEN}",
                        "--method", "tools/call", "--tool-name", "sessions_search", "--tool-arg", "query=loan",
                        "limit=5")
        result = json.loads(run.stdout)
        assert result["isError"] is False and result["structuredContent"] == json.loads(result["content"][0]["text"])
        # visibility "all": the token's requester sees the other session too; the rewound one is still indexing
        found = result["structuredContent"]
        assert found["indexing"] is True and {hit["sessionKey"] for hit in found["results"]} == {
            MAIN, "agent:main:other"}
    finally:
        stop(srv)
