"""The `sessionsearch` command: search, history, status, reconcile (and the service commands)."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from . import logging as sslogging
from .engine import Engine
from .auth import new_token
from .errors import InvalidRequest, SessionSearchError
from .settings import Settings


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="data directory (SESSIONSEARCH_DATA_DIR, default ./data)")
    p.add_argument("--config", help="TOML settings file (SESSIONSEARCH_CONFIG)")
    p.add_argument("--database-url", dest="database_url",
                   help="PostgreSQL URL postgresql://user:password@host:5432/db (SESSIONSEARCH_DATABASE_URL, TOML "
                        "database.url); unset: SQLite files under the data dir")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sessionsearch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("search", help="search transcripts")
    _common(p)
    p.add_argument("query", nargs="+", help="words to find (literal; all must match)")
    p.add_argument("--agent", dest="agentId", help="search this agent's sessions")
    p.add_argument("--session-key", dest="sessionKeys", action="append", help="search this session (repeatable)")
    p.add_argument("--session-id", dest="sessionId", help="only this session window")
    p.add_argument("--role", choices=["user", "assistant"])
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--prefix", action="store_true", help="the last word may be a prefix")
    p.add_argument("--recent", action="store_true", help="newest first instead of by relevance")
    p.add_argument("--since", help="only messages at or after this time (ISO 8601 like 2026-01-01, or epoch ms)")
    p.add_argument("--until", help="only messages before this time (ISO 8601 or epoch ms)")
    p.add_argument("--sessions", action="store_true",
                   help="one result per session: its best hit and how many hits it has (limit counts sessions)")
    p.add_argument("--requester", help="search as this session key (visibility rules apply)")

    p = sub.add_parser("history", help="read a session's messages")
    _common(p)
    p.add_argument("session_key")
    p.add_argument("--message-id", dest="messageId", help="read the window around this message")
    p.add_argument("--session-id", dest="sessionId", help="the window the message is in")
    p.add_argument("--limit", type=int)
    p.add_argument("--offset", type=int)
    p.add_argument("--include-tools", dest="includeTools", action="store_true")
    p.add_argument("--requester", help="read as this session key (visibility rules apply)")

    p = sub.add_parser("status", help="backlog and completeness per agent")
    _common(p)
    p.add_argument("--agent", dest="agentId")

    p = sub.add_parser("migrate", help="apply the store's schema migrations now (PostgreSQL, or every agent "
                                       "database under the data dir) and print the versions")
    _common(p)

    p = sub.add_parser("reconcile", help="reconcile every window that needs it, now, in this process")
    _common(p)
    p.add_argument("--agent", dest="agentId")

    p = sub.add_parser("optimize", help="build postings that answer one-word searches for common words fast")
    _common(p)
    p.add_argument("--agent", dest="agentId")
    p.add_argument("--min-docs", dest="min_docs", type=int,
                   help="a word needs at least this many messages (SESSIONSEARCH_POSTINGS_MIN_DOCS; default 500 "
                        "on SQLite, 5000 on PostgreSQL) and 0.05%% (SQLite) or 0.5%% (PostgreSQL) of them")

    p = sub.add_parser("import", help="import the gateway's JSONL transcripts and sessions.json")
    _common(p)
    p.add_argument("path", help="a state dir, one agent's dir or sessions dir, or one .jsonl file")
    p.add_argument("--agent", dest="agentId", help="only this agent (or: the agent of a lone sessions dir)")

    for name, text in (("serve", "run the HTTP API (embedded reconciliation without Redis)"),
                       ("demo", "import a sample, serve it embedded, and show a search complete")):
        p = sub.add_parser(name, help=text)
        _common(p)
        p.add_argument("--host", help="address to bind (SESSIONSEARCH_HOST, default 127.0.0.1)")
        p.add_argument("--port", type=int, help="port to bind (SESSIONSEARCH_PORT, default 8780)")
        if name == "serve":
            p.add_argument("--workers", type=int, default=1, help="web processes (default 1)")

    p = sub.add_parser("mcp", help="serve the MCP tools on stdin/stdout, for MCP clients that spawn a process")
    p.add_argument("--data-dir", help="data directory (SESSIONSEARCH_DATA_DIR, default ./data)")
    p.add_argument("--config", help="TOML settings file (SESSIONSEARCH_CONFIG)")
    p.add_argument("--requester", help="answer as this session key (its visibility rules apply); "
                                       "without it, as the operator")
    p.add_argument("--sandboxed", action="store_true", help="the requester is sandboxed")

    p = sub.add_parser("token", help="scoped tokens: bound to one requester, for the agent tools and MCP")
    tokens = p.add_subparsers(dest="token_command", required=True)
    p = tokens.add_parser("new", help="print a fresh token and the [[auth.tokens]] entry that grants it")
    p.add_argument("--requester", required=True, help="the session key the token acts as")
    p.add_argument("--sandboxed", action="store_true", help="the requester is sandboxed")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("worker", help="run Dramatiq reconcile workers against Redis")
    _common(p)
    p.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--threads", type=int, default=8, help="threads per process (default 8: jobs overlap their queue round trips)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address of the metrics endpoint")
    p.add_argument("--metrics-port", type=int, default=9191, help="port of the metrics endpoint (0: any)")
    p.add_argument("--metrics-dir", help="multiprocess metrics directory (wiped at start)")
    p.add_argument("--cpu-priority", choices=("idle", "normal"),
                   help="CPU scheduling of the worker processes (SESSIONSEARCH_WORKER_CPU_PRIORITY, default "
                        "idle: reconcile on CPU time that searches and appends leave)")
    return parser


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.load(config=args.config, data_dir=args.data_dir, database_url=args.database_url)


def _when(ms: int) -> str:
    """A UTC minute for any epoch-ms value; one that datetime cannot hold (rows stored before the
    API checked the range) prints as the number itself rather than failing the whole listing."""
    try:
        t = _EPOCH + timedelta(milliseconds=ms)
    except (OverflowError, ValueError, TypeError):
        return f"{ms} ms"
    return f"{t.year:04}-{t.month:02}-{t.day:02} {t.hour:02}:{t.minute:02}"  # strftime leaves year 1 unpadded


def _print_search(result: dict[str, Any]) -> None:
    hits = result["results"]
    if not hits:
        print("no matches")
    for n, hit in enumerate(hits, 1):
        print(f"{n:>2}. {_when(hit['timestamp'])}  {hit['role']:<9} {hit['sessionKey']}  "
              f"[{hit['sessionId']} / {hit['messageId']}]  score {hit['score']:.3f}")
        print(f"    {hit['snippet']}")
    _print_notes(result)


def _print_notes(result: dict[str, Any]) -> None:
    notes = []
    if result.get("truncated"):
        notes.append("more matches exist; refine the query")
    if result.get("indexing"):
        notes.append("indexing in progress: results may be incomplete")
    if result.get("archivedTranscriptsExcluded"):
        notes.append(f"{result['archivedTranscriptsExcluded']} archived transcript(s) not searched")
    for note in notes:
        print(f"({note})")


def _print_sessions(result: dict[str, Any]) -> None:
    if not result["results"]:
        print("no matches")
    for n, session in enumerate(result["results"], 1):
        best = session["best"]
        label = f"  \"{session['label']}\"" if session["label"] else ""
        print(f"{n:>2}. {session['sessionKey']}{label}  {session['hits']} hit(s), best "
              f"{_when(best['timestamp'])} {best['role']} [{best['sessionId']} / {best['messageId']}]")
        print(f"    {best['snippet']}")
    _print_notes(result)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] if isinstance(b.get("text"), str) else f"[{b.get('type')}]"
                         for b in content if isinstance(b, dict))
    return ""


def _print_history(result: dict[str, Any]) -> None:
    print(f"{result['sessionKey']}  window {result.get('sessionId')}  "
          f"{len(result['messages'])} of {result['totalMessages']} messages")
    for m in result["messages"]:
        print(f"[{_when(m['timestamp'])}] {m['role']} ({m['messageId']}):")
        for line in _content_text(m["content"]).splitlines() or [""]:
            print(f"    {line}")
    if result.get("hasMore"):
        print(f"(older messages: --offset {result['nextOffset']})")


def _queue_depth(settings: Settings) -> dict[str, Any]:
    from .queue import Pipeline

    pipeline = Pipeline(settings)
    try:
        return pipeline.queue_depth()
    except Exception as exc:  # the status is still worth printing without the queue
        return {"error": f"queue unreachable: {exc}"}
    finally:
        pipeline.close()


def _print_status(result: dict[str, Any]) -> None:
    print(f"{'agent':<20} {'windows':>8} {'backlog':>8} {'messages':>10} {'indexed':>10} {'complete':>9}")
    for a in result["agents"]:
        print(f"{a['agentId']:<20} {a['windows']:>8} {a['backlog']:>8} {a['messages']:>10} "
              f"{a['indexedMessages']:>10} {a['completeness'] * 100:>8.2f}%")
    if result.get("schema"):
        _print_schema(result["schema"])
    queue = result.get("queue")
    if queue:
        print("queue: " + (queue["error"] if "error" in queue else
                           f"{queue['ready']} ready, {queue['delayed']} delayed (retries)"))


def _print_import(result: dict[str, Any]) -> None:
    for f in result["files"]:
        extra = []
        if f["skipped_lines"]:
            extra.append(f"{f['skipped_lines']} lines imported before")
        if f["duplicates"]:
            extra.append(f"{f['duplicates']} duplicates")
        if f["bad"]:
            extra.append(f"{f['bad']} bad lines")
        print(f"{f['file']}: {f['imported']} events -> {f['session_key']}" + (f" ({', '.join(extra)})" if extra else ""))
    for kind in ("problem", "note"):
        for p in result[kind + "s"]:
            where = f"{p['file']}:{p['line']}" if p["line"] else p["file"]
            print(f"{kind}: {where}: {p['message']}")
    rate = f", {result['eventsPerSecond']:,} events/s" if result["eventsPerSecond"] else ""
    print(f"imported {result['events']} events in {result['sessions']} sessions, {len(result['problems'])} "
          f"problem(s), {result['seconds']} s{rate}; run `sessionsearch reconcile` or a worker to index them")


class Progress:
    """A one-line progress bar on a terminal; silent when output is not a terminal."""

    def __init__(self, label: str, stream=sys.stderr, unit: str = "") -> None:
        self.label = label
        self.stream = stream
        self.unit = unit
        self.active = stream.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self.active or total <= 0:
            return
        width = 30
        filled = int(width * done / total)
        count = f"{done * 100 // total}%" if self.unit == "bytes" else f"{done}/{total}"
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {count}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def _print_schema(schema: dict[str, Any]) -> None:
    print(f"schema: version {schema['version']} of {schema['latest']} ({schema['database']})")


def _print_migrate(result: dict[str, Any]) -> None:
    if not result["databases"]:
        print(f"nothing to migrate: no database yet ({result['store']})")
    for db in result["databases"]:
        change = "already current" if db["from"] == db["to"] else f"migrated from {db['from']}"
        print(f"{db['database']}: schema version {db['to']} ({change})")


async def _migrate(args: argparse.Namespace, settings: Settings) -> int:
    from .store import backend_for

    backend = backend_for(settings)  # not opened: opening a store migrates already
    try:
        done = await backend.migrate()
        schema = await backend.schema_version()
    finally:
        await backend.close()
    _emit(args, {"store": schema["store"], "latest": schema["latest"], "databases": done}, _print_migrate)
    return 0


async def _run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if args.command == "migrate":
        return await _migrate(args, settings)
    async with Engine(settings=settings) as engine:
        if args.command == "search":
            body: dict[str, Any] = {"query": " ".join(args.query), "limit": args.limit,
                                    "match": "prefix" if args.prefix else "exact",
                                    "order": "recent" if args.recent else "relevance"}
            for name in ("agentId", "sessionKeys", "sessionId", "role"):
                if getattr(args, name):
                    body[name] = getattr(args, name)
            for name in ("since", "until"):  # digits alone are epoch ms
                value = getattr(args, name)
                if value is not None:
                    body[name] = int(value) if re.fullmatch("-?[0-9]+", value) else value
            if args.sessions:
                body["resultMode"] = "sessions"
            if args.requester:
                body["requester"] = {"sessionKey": args.requester}
            result = await engine.search(body)
            _emit(args, result, _print_sessions if args.sessions else _print_search)
        elif args.command == "history":
            body = {"sessionKey": args.session_key}
            for name in ("messageId", "sessionId", "limit", "offset"):
                if getattr(args, name) is not None:
                    body[name] = getattr(args, name)
            if args.includeTools:
                body["includeTools"] = True
            if args.requester:
                body["requester"] = {"sessionKey": args.requester}
            _emit(args, await engine.history(body), _print_history)
        elif args.command == "status":
            status = await engine.index_status(args.agentId)
            status["schema"] = await engine.backend.schema_version()
            if settings.redis_url:
                status["queue"] = _queue_depth(settings)
            _emit(args, status, _print_status)
        elif args.command == "import":
            from .importer import run_import
            report = await run_import(engine, Path(args.path), agent_id=args.agentId,
                                      progress=Progress("importing", unit="bytes"))
            _emit(args, report.to_dict(), _print_import)
        elif args.command == "optimize":
            limits = {"min_docs": args.min_docs} if args.min_docs is not None else {}
            _emit(args, await engine.optimize(args.agentId, **limits), _print_optimize)
        elif args.command == "reconcile":
            outcomes = await engine.reconcile_pending(args.agentId, progress=Progress("reconciling"))
            status = await engine.index_status(args.agentId)
            _emit(args, {"outcomes": outcomes, **status}, lambda r: (print(
                "reconciled: " + (", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())) or "nothing to do")),
                _print_status(r)))
    return 0


def _print_optimize(result: dict[str, Any]) -> None:
    for agent, done in result["agents"].items():
        words = done["words"]
        print(f"{agent}: postings for {len(words)} common word(s)"
              + (": " + ", ".join(f"{w} ({v['rows']:,} rows)" for w, v in words.items()) if words else "")
              + (f"; dropped {', '.join(done['dropped'])}" if done["dropped"] else "")
              + (f"; postings for {p['count']} prefix(es), {p['rows']:,} rows" if (p := done.get("prefixes")) else ""))


def _mcp(args: argparse.Namespace) -> int:
    from .api.mcp_server import serve_stdio
    from .auth import OPERATOR, Caller
    from .search.query import parse_requester

    if args.sandboxed and not args.requester:
        raise InvalidRequest("--sandboxed needs --requester", field="sandboxed")
    settings = Settings.load(config=args.config, data_dir=args.data_dir)
    caller = OPERATOR
    if args.requester:
        caller = Caller(parse_requester({"sessionKey": args.requester, "sandboxed": args.sandboxed}))
    sslogging.configure(settings.log_level)  # stderr: stdout carries the protocol
    return asyncio.run(serve_stdio(settings, caller))


def _print_token(result: dict[str, Any]) -> None:
    print(f"token (give it to the client; it is not stored anywhere):\n  {result['token']}\n")
    print("add to the config file (SESSIONSEARCH_CONFIG) and restart the web processes:\n")
    print(result["toml"], end="")


def _emit(args: argparse.Namespace, result: dict[str, Any], human) -> None:
    if args.json:
        json.dump(result, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        human(result)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("serve", "demo"):
            settings = Settings.load(config=args.config, data_dir=args.data_dir, host=args.host, port=args.port,
                                     database_url=args.database_url)
            sslogging.configure(settings.log_level if args.command == "serve" else "WARNING")
            from .api.server import run_demo, run_server
            if args.command == "serve":
                return run_server(settings, workers=args.workers)
            return asyncio.run(run_demo(settings))
        if args.command == "mcp":
            return _mcp(args)
        if args.command == "token":
            _emit(args, new_token(args.requester, sandboxed=args.sandboxed), _print_token)
            return 0
        if args.command == "worker":
            settings = Settings.load(config=args.config, data_dir=args.data_dir, worker_cpu_priority=args.cpu_priority,
                                     database_url=args.database_url)
            sslogging.configure(settings.log_level)
            from .worker.main import run_worker
            return run_worker(settings, processes=args.processes, threads=args.threads,
                              metrics_host=args.metrics_host, metrics_port=args.metrics_port,
                              metrics_dir=args.metrics_dir)
        sslogging.configure("WARNING")
        return asyncio.run(_run(args))
    except SessionSearchError as exc:
        if getattr(args, "json", False):
            json.dump({"error": {"code": exc.code, "message": exc.message}}, sys.stdout)
            sys.stdout.write("\n")
        else:
            print(f"sessionsearch: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
