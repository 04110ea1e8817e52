"""What the MCP doors cost next to the agent tool over plain HTTP, measured side by side.

    .venv/bin/python bench/bench_mcp.py [--sessions 200] [--messages 50] [--reps 300]

Builds a small data dir (sessions x messages, reconciled), starts a real `sessionsearch serve`
on loopback and a real `sessionsearch mcp` on stdio, then runs the same searches round-robin
through `POST /v1/tools/sessions_search`, `POST /mcp` (a stateless JSON-RPC tools/call on a
kept-alive connection) and the SDK client over stdio, one call at a time. Also: the first `/mcp`
call of a web process (it imports the SDK then), and the CPU a process spends importing the web
app with and without the SDK (what building `/mcp` lazily saves each web process that never
serves MCP). Figures go to bench/results/mcp.json.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sessionsearch.protocol import AppendParams

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402

HERE = Path(__file__).resolve().parent
WORDS = ("loan invoice notary friday monday budget travel hotel flight refund contract signature meeting "
         "draft review deploy server backup invoice paris tokyo berlin lunch dinner report quarterly").split()
QUERIES = ["loan", "invoice notary", "friday meeting", "quarterly report", "tokyo flight", "refund contract"]
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           "MCP-Protocol-Version": "2025-06-18"}


async def build(data: Path, sessions: int, messages: int) -> None:
    rng = random.Random(7)
    async with Engine(data, settings=Settings(data_dir=str(data))) as engine:
        for s in range(sessions):
            parent, events = None, []
            for m in range(messages):
                mid = f"s{s}m{m}"
                events.append({"type": "message", "id": mid, "parentId": parent, "message": {
                    "role": "user" if m % 2 == 0 else "assistant",
                    "content": " ".join(rng.choice(WORDS) for _ in range(12)), "timestamp": 1_700_000_000_000 + m}})
                parent = mid
            await engine.append(AppendParams(sessionKey=f"agent:main:s{s}", events=events))


def cpu_of_import(module: str, runs: int = 3) -> float:
    """Median user+system CPU seconds a fresh interpreter spends importing `module`."""
    out = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(out)


def post(conn: http.client.HTTPConnection, path: str, body: dict) -> dict:
    try:
        conn.request("POST", path, json.dumps(body), HEADERS)
        response = conn.getresponse()
    except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
        conn.close()  # the server closed an idle kept-alive connection: open another
        conn.request("POST", path, json.dumps(body), HEADERS)
        response = conn.getresponse()
    payload = response.read()
    assert response.status == 200, (path, response.status, payload[:300])
    return json.loads(payload)


def summary(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {"calls": len(ms), "p50_ms": round(pct(ms, 0.5), 3), "p95_ms": round(pct(ms, 0.95), 3)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--reps", type=int, default=300)
    args = parser.parse_args()
    sslogging.configure("WARNING")
    work = HERE / "work" / "mcp"
    shutil.rmtree(work, ignore_errors=True)
    data = work / "data"
    await build(data, args.sessions, args.messages)

    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    port = 18780 + os.getpid() % 1000
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    env.update(SESSIONSEARCH_DATA_DIR=str(data), SESSIONSEARCH_PORT=str(port), SESSIONSEARCH_LOG_LEVEL="WARNING")
    log = open(work / "serve.log", "w")
    serve = subprocess.Popen([sys.executable, "-m", "sessionsearch.cli", "serve"], env=env, stdout=log, stderr=log)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(600):
            try:
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                break
            except OSError:
                conn.close()
                time.sleep(0.1)
        started = time.perf_counter()
        post(conn, "/mcp", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
        first_mcp_s = time.perf_counter() - started

        params = StdioServerParameters(command=sys.executable, args=["-m", "sessionsearch.cli", "mcp"],
                                       env={**env, "PATH": os.environ.get("PATH", "")})
        with open(work / "mcp.log", "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                doors: dict[str, list[float]] = {"v1_tools_http": [], "mcp_http": [], "mcp_stdio_sdk": []}
                for rep in range(args.reps):
                    query = QUERIES[rep % len(QUERIES)]
                    for door in doors:  # round-robin: every door meets the same load and cache
                        t0 = time.perf_counter()
                        if door == "v1_tools_http":
                            hits = post(conn, "/v1/tools/sessions_search", {"query": query})["results"]
                        elif door == "mcp_http":
                            result = post(conn, "/mcp", {"jsonrpc": "2.0", "id": rep, "method": "tools/call", "params": {
                                "name": "sessions_search", "arguments": {"query": query}}})["result"]
                            hits = result["structuredContent"]["results"]
                        else:
                            hits = (await client.call_tool("sessions_search", {"query": query})).structured_content[
                                "results"]
                        doors[door].append(time.perf_counter() - t0)
                        assert hits, (door, query)
    finally:
        serve.terminate()
        serve.wait(60)
        log.close()

    figures = {door: summary(times) for door, times in doors.items()}
    base = figures["v1_tools_http"]["p50_ms"]
    for door in ("mcp_http", "mcp_stdio_sdk"):
        figures[door]["p50_ratio_to_v1_tools"] = round(figures[door]["p50_ms"] / base, 2)
    cpu_app = cpu_of_import("sessionsearch.api.app")
    cpu_sdk = cpu_of_import("sessionsearch.api.mcp_server")
    result = {
        "corpus": {"sessions": args.sessions, "messagesPerSession": args.messages},
        "searches": figures,
        "first_mcp_call_ms": round(first_mcp_s * 1000, 1),
        "import_cpu_s": {"web_app_without_sdk": round(cpu_app, 3), "with_mcp_sdk": round(cpu_sdk, 3)},
        "machine": {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)},
    }
    print(json.dumps(result, indent=2))
    (HERE / "results" / "mcp.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
