"""The `sessionsearch` command: search, history, status, reconcile (and the service commands).

Each subcommand is one function in COMMANDS, given the parsed arguments; the flags that several
subcommands take are declared once, in the flag groups below, and a flag that sets a setting has
that setting's name as its `dest` (`_settings` passes those on to `Settings.load`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from . import limits
from . import logging as sslogging
from .auth import new_token
from .engine import Engine
from .errors import InvalidRequest, NotFound, SessionSearchError
from .protocol import HistoryParams, ListParams, Params, SearchParams, StatusParams
from .settings import BY_NAME, Settings

Run = Callable[[argparse.Namespace], int]


# --- flags that several subcommands take, each declared once ------------------------------------

def _group(*flags: tuple[tuple[str, ...], dict[str, Any]]) -> argparse.ArgumentParser:
    """A parent parser holding `flags`, for the subcommands that take them."""
    parser = argparse.ArgumentParser(add_help=False)
    for names, options in flags:
        parser.add_argument(*names, **options)
    return parser


STORE = _group(
    (("--data-dir",), {"dest": "data_dir", "help": "data directory (SESSIONSEARCH_DATA_DIR, default ./data)"}),
    (("--config",), {"help": "TOML settings file (SESSIONSEARCH_CONFIG)"}),
    (("--database-url",), {"dest": "database_url", "help": (
        "PostgreSQL URL postgresql://user:password@host:5432/db (SESSIONSEARCH_DATABASE_URL, TOML database.url); "
        "unset: SQLite files under the data dir")}))
QUEUE = _group(
    (("--redis-url",), {"dest": "redis_url", "help": (
        "Redis broker URL (SESSIONSEARCH_REDIS_URL); unset: reconciliation in-process")}))
BIND = _group(
    (("--host",), {"help": "address to bind (SESSIONSEARCH_HOST, default 127.0.0.1)"}),
    (("--port",), {"type": int, "help": "port to bind (SESSIONSEARCH_PORT, default 8780)"}))
OUTPUT = _group((("--json",), {"action": "store_true", "help": "machine-readable output"}))
SANDBOXED = _group((("--sandboxed",), {"action": "store_true", "help": "the requester is sandboxed"}))


def _settings(args: argparse.Namespace) -> Settings:
    """The settings the flags, the environment and the config file give (in that order of precedence)."""
    flags = {name: value for name, value in vars(args).items() if name in BY_NAME}
    return Settings.load(config=args.config, **flags)


def _help(params: type[Params], attribute: str) -> str:
    """A flag's help: its field's description in the method's declaration (protocol/), argparse-escaped."""
    return (params.model_fields[attribute].description or "").replace("%", "%%")


SCOPE_FORM = (': a JSON object, e.g. \'{"kinds": ["direct"], "activeMinutes": 60}\' (fields: agentIds, label, '
              "search, kinds, excludeSubagents, excludeCron, excludeSystem, group, spawnedBy, activeMinutes, palette)")


def _json_object(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not JSON") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sessionsearch", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str, *groups: argparse.ArgumentParser) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, parents=list(groups))

    p = command("search", "search transcripts", STORE, OUTPUT)
    p.add_argument("query", nargs="+", help=_help(SearchParams, "query"))
    p.add_argument("--mode", choices=["keyword", "semantic", "hybrid"], default="keyword",
                   help=_help(SearchParams, "mode"))
    p.add_argument("--agent", dest="agentId", help=_help(SearchParams, "agent_id"))
    p.add_argument("--session-key", dest="sessionKeys", action="append",
                   help=_help(SearchParams, "session_keys") + "; the flag once for each")
    p.add_argument("--session-id", dest="sessionId", help=_help(SearchParams, "session_id"))
    p.add_argument("--role", choices=["user", "assistant"], help=_help(SearchParams, "role"))
    p.add_argument("--limit", type=int, default=10, help=_help(SearchParams, "limit"))
    p.add_argument("--prefix", action="store_true", help="the last word may be a prefix")
    p.add_argument("--recent", action="store_true", help="newest first instead of by relevance")
    p.add_argument("--since", help=_help(SearchParams, "since"))
    p.add_argument("--until", help=_help(SearchParams, "until"))
    p.add_argument("--sessions", action="store_true",
                   help="one result per session: its best hit and how many hits it has (limit counts sessions)")
    p.add_argument("--scope", type=_json_object, help=_help(SearchParams, "scope") + SCOPE_FORM)
    p.add_argument("--requester", help="search as this session key (visibility rules apply)")

    p = command("list", "list sessions, newest activity first", STORE, OUTPUT)
    p.add_argument("--agent", dest="agentId", help=_help(ListParams, "agent_id"))
    p.add_argument("--search", help=_help(ListParams, "search"))
    p.add_argument("--scope", type=_json_object, help=_help(ListParams, "scope") + SCOPE_FORM)
    p.add_argument("--cursor", help=_help(ListParams, "cursor"))
    p.add_argument("--limit", type=int, help=_help(ListParams, "limit"))
    p.add_argument("--requester", help="list as this session key (visibility rules apply)")

    p = command("history", "read a session's messages", STORE, OUTPUT)
    p.add_argument("session_key")
    p.add_argument("--message-id", dest="messageId", help=(
        "read the window around this message (one that is not there is an error, exit 2; with --json, the "
        "API's empty window)"))
    p.add_argument("--session-id", dest="sessionId", help=_help(HistoryParams, "session_id"))
    p.add_argument("--limit", type=int, help=_help(HistoryParams, "limit"))
    p.add_argument("--offset", type=int, help=_help(HistoryParams, "offset"))
    p.add_argument("--include-tools", dest="includeTools", action="store_true",
                   help=_help(HistoryParams, "include_tools"))
    p.add_argument("--requester", help="read as this session key (visibility rules apply)")

    p = command("status", "backlog and completeness per agent, and how far the meaning index is embedded", STORE,
                QUEUE, OUTPUT)
    p.add_argument("--agent", dest="agentId", help=_help(StatusParams, "agent_id"))

    command("migrate", "apply the store's schema migrations now (PostgreSQL, or every agent database under the "
            "data dir) and print the versions", STORE, OUTPUT)

    p = command("reconcile", "reconcile every window that needs it, and embed what waits for the meaning index, "
                "now, in this process", STORE, OUTPUT)
    p.add_argument("--agent", dest="agentId")

    p = command("optimize", "build postings that answer one-word searches for common words fast", STORE,
                OUTPUT)
    p.add_argument("--agent", dest="agentId")
    p.add_argument("--min-docs", dest="min_docs", type=int,
                   help="a word needs at least this many messages (SESSIONSEARCH_POSTINGS_MIN_DOCS; default 500 "
                        "on SQLite, 5000 on PostgreSQL) and 0.05%% (SQLite) or 0.5%% (PostgreSQL) of them")

    p = command("import", "import the gateway's JSONL transcripts and sessions.json", STORE, OUTPUT)
    p.add_argument("path", help="a state dir, one agent's dir or sessions dir, or one .jsonl file")
    p.add_argument("--agent", dest="agentId", help="only this agent (or: the agent of a lone sessions dir)")

    p = command("serve", "run the HTTP API (embedded reconciliation without Redis)", STORE, QUEUE, BIND,
                OUTPUT)
    p.add_argument("--workers", type=int, default=1, help="web processes (default 1)")
    command("demo", "import a sample, serve it embedded, and show a search complete", STORE, BIND, OUTPUT)

    p = command("mcp", "serve the MCP tools on stdin/stdout, for MCP clients that spawn a process", STORE,
                QUEUE, SANDBOXED)
    p.add_argument("--requester", help="answer as this session key (its visibility rules apply); "
                                       "without it, as the operator")

    p = command("token", "scoped tokens: bound to one requester, for the agent tools and MCP")
    tokens = p.add_subparsers(dest="token_command", required=True)
    p = tokens.add_parser("new", help="print a fresh token and the [[auth.tokens]] entry that grants it",
                          parents=[SANDBOXED, OUTPUT])
    p.add_argument("--requester", required=True, help="the session key the token acts as")

    p = command("worker", "run Dramatiq reconcile workers against Redis", STORE, QUEUE, OUTPUT)
    p.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--threads", type=int, default=8,
                   help="threads per process (default 8: jobs overlap their queue round trips)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address of the metrics endpoint")
    p.add_argument("--metrics-port", type=int, default=9191, help="port of the metrics endpoint (0: any)")
    p.add_argument("--metrics-dir", help="multiprocess metrics directory (wiped at start)")
    p.add_argument("--cpu-priority", dest="worker_cpu_priority", choices=("idle", "normal"),
                   help="CPU scheduling of the worker processes (SESSIONSEARCH_WORKER_CPU_PRIORITY, default "
                        "idle: reconcile on CPU time that searches and appends leave)")
    return parser


# --- the commands -------------------------------------------------------------------------------

EngineCommand = Callable[[argparse.Namespace, Engine], Awaitable[None]]


def _on_engine(work: EngineCommand) -> Run:
    """A command that works on an open engine over the store the flags name (warnings logged only)."""

    def run(args: argparse.Namespace) -> int:
        sslogging.configure("WARNING")

        async def go() -> None:
            async with Engine(settings=_settings(args)) as engine:
                await work(args, engine)

        asyncio.run(go())
        return 0

    return run


def _requester(args: argparse.Namespace) -> dict[str, Any]:
    return {"requester": {"sessionKey": args.requester}} if args.requester else {}


async def _search(args: argparse.Namespace, engine: Engine) -> None:
    body: dict[str, Any] = {"query": " ".join(args.query), "limit": args.limit,
                            "match": "prefix" if args.prefix else "exact",
                            "order": "recent" if args.recent else "relevance"}
    if args.mode != "keyword":  # a keyword search sends what it always sent
        body["mode"] = args.mode
    for name in ("agentId", "sessionKeys", "sessionId", "role"):
        if getattr(args, name):
            body[name] = getattr(args, name)
    for name in ("since", "until"):  # digits alone are epoch ms
        value = getattr(args, name)
        if value is not None:
            body[name] = int(value) if re.fullmatch("-?[0-9]+", value) else value
    if args.sessions:
        body["resultMode"] = "sessions"
    if args.scope is not None:
        body["scope"] = args.scope
    result = await engine.search(SearchParams.of({**body, **_requester(args)}))
    _emit(args, dict(result), _print_sessions if args.sessions else _print_search)


async def _list(args: argparse.Namespace, engine: Engine) -> None:
    body = {name: getattr(args, name) for name in ("agentId", "search", "scope", "cursor", "limit")
            if getattr(args, name) is not None}
    result = await engine.list_sessions(ListParams.of({**body, **_requester(args)}))
    _emit(args, dict(result), _print_list)


def _print_list(result: dict[str, Any]) -> None:
    for s in result["sessions"]:
        title = s["label"] or s["displayName"] or ""
        print(f"[{_when(s['updatedAt'])}] {s['sessionKey']}  {s['kind'] or ''}  {title}".rstrip())
    if result.get("nextCursor"):
        print(f"(more: --cursor {result['nextCursor']})")


async def _history(args: argparse.Namespace, engine: Engine) -> None:
    body: dict[str, Any] = {"sessionKey": args.session_key}
    for name in ("messageId", "sessionId", "limit", "offset"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    if args.includeTools:
        body["includeTools"] = True
    result = await engine.history(HistoryParams.of({**body, **_requester(args)}))
    if args.messageId is not None and not result["messages"] and not args.json:
        # the API answers an empty window for a message that is not there (SPEC §5); a person needs the why
        window = f" window {args.sessionId!r} of" if args.sessionId else ""
        raise NotFound(f"message {args.messageId!r} is not in{window} session {args.session_key!r} (or not on its "
                       "current branch): check the id (`sessionsearch search` prints each hit's), or leave out "
                       "--message-id to read the newest messages")
    _emit(args, dict(result), _print_history)


async def _status(args: argparse.Namespace, engine: Engine) -> None:
    status: dict[str, Any] = dict(await engine.index_status(StatusParams.of({"agentId": args.agentId})))
    status["schema"] = await engine.backend.schema_version()
    if not engine.settings.database_url:  # SQLite, a database per agent: what the open files allow
        s = engine.settings
        status["openFiles"] = limits.derive(s.open_agents_max, s.readers_per_agent).to_dict()
    if engine.settings.redis_url:
        status["queue"] = _queue_depth(engine.settings)
    _emit(args, status, _print_status)


async def _import(args: argparse.Namespace, engine: Engine) -> None:
    from .importer import run_import

    report = await run_import(engine, Path(args.path), agent_id=args.agentId,
                              progress=Progress("importing", unit="bytes"))
    _emit(args, report.to_dict(), _print_import)


async def _optimize(args: argparse.Namespace, engine: Engine) -> None:
    limits = {"min_docs": args.min_docs} if args.min_docs is not None else {}
    _emit(args, await engine.optimize(args.agentId, **limits), _print_optimize)


async def _reconcile(args: argparse.Namespace, engine: Engine) -> None:
    outcomes = await engine.reconcile_pending(args.agentId, progress=Progress("reconciling"))
    # then the meaning index, over the rows reconciliation just published: a search by meaning after
    # `import` and `reconcile` is complete without a worker
    embedded = await engine.embed_pending(args.agentId)
    status = await engine.index_status(StatusParams.of({"agentId": args.agentId}))

    def human(result: dict[str, Any]) -> None:
        print("reconciled: " + (", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())) or "nothing to do"))
        print("meaning index: " + (", ".join(f"{k} {v}" for k, v in sorted(embedded.items())) or "nothing to embed"))
        _print_status(result)

    _emit(args, {"outcomes": outcomes, "embedOutcomes": embedded, **status}, human)


def _migrate(args: argparse.Namespace) -> int:
    from .store import backend_for

    sslogging.configure("WARNING")
    settings = _settings(args)

    async def migrate() -> dict[str, Any]:
        backend = backend_for(settings)  # not opened: opening a store migrates already
        try:
            done = await backend.migrate()
            schema = await backend.schema_version()
        finally:
            await backend.close()
        return {"store": schema["store"], "latest": schema["latest"], "databases": done}

    _emit(args, asyncio.run(migrate()), _print_migrate)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from .api.server import run_server

    settings = _settings(args)
    sslogging.configure(settings.log_level)
    return run_server(settings, workers=args.workers)


def _demo(args: argparse.Namespace) -> int:
    from .api.server import demo_settings, run_demo

    settings = demo_settings(_settings(args))
    sslogging.configure("WARNING")
    return asyncio.run(run_demo(settings))


def _mcp(args: argparse.Namespace) -> int:
    from .api.mcp_server import serve_stdio
    from .auth import OPERATOR, Caller
    from .identity import parse_requester

    if args.sandboxed and not args.requester:
        raise InvalidRequest("--sandboxed needs --requester", field="sandboxed")
    settings = _settings(args)
    caller = OPERATOR
    if args.requester:
        caller = Caller(parse_requester({"sessionKey": args.requester, "sandboxed": args.sandboxed}))
    sslogging.configure(settings.log_level)  # stderr: stdout carries the protocol
    return asyncio.run(serve_stdio(settings, caller))


def _token(args: argparse.Namespace) -> int:
    _emit(args, new_token(args.requester, sandboxed=args.sandboxed), _print_token)
    return 0


def _worker(args: argparse.Namespace) -> int:
    from .worker.main import run_worker

    settings = _settings(args)
    sslogging.configure(settings.log_level)
    return run_worker(settings, processes=args.processes, threads=args.threads,
                      metrics_host=args.metrics_host, metrics_port=args.metrics_port, metrics_dir=args.metrics_dir)


# the subcommands by name (`token` has one of its own, `new`)
COMMANDS: dict[str, Run] = {
    "search": _on_engine(_search), "history": _on_engine(_history), "list": _on_engine(_list),
    "status": _on_engine(_status),
    "migrate": _migrate, "reconcile": _on_engine(_reconcile), "optimize": _on_engine(_optimize),
    "import": _on_engine(_import), "serve": _serve, "demo": _demo, "mcp": _mcp, "token": _token, "worker": _worker,
}


# --- output ---------------------------------------------------------------------------------------

def _emit(args: argparse.Namespace, result: dict[str, Any], human: Callable[[dict[str, Any]], None]) -> None:
    if args.json:
        json.dump(result, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        human(result)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
              f"[{hit['sessionId']} / {hit['messageId']}]  score {hit['score']:.3g}{_matched_by(hit)}")
        print(f"    {hit['snippet']}")
    _print_notes(result)


def _matched_by(hit: dict[str, Any]) -> str:
    """How a semantic or hybrid hit was found ("  by keyword+semantic"); nothing for a keyword search."""
    return f"  by {'+'.join(hit['matchedBy'])}" if hit.get("matchedBy") else ""


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
              f"{_when(best['timestamp'])} {best['role']} [{best['sessionId']} / {best['messageId']}]"
              f"{_matched_by(best)}")
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
    print(f"{'agent':<20} {'windows':>8} {'backlog':>8} {'messages':>10} {'indexed':>10} {'complete':>9} "
          f"{'embedded':>10} {'to embed':>9}")
    for a in result["agents"]:
        print(f"{a['agentId']:<20} {a['windows']:>8} {a['backlog']:>8} {a['messages']:>10} "
              f"{a['indexedMessages']:>10} {a['completeness'] * 100:>8.2f}% "
              f"{a['embeddedMessages']:>10} {a['embeddingBacklog']:>9}")
    if result.get("schema"):
        _print_schema(result["schema"])
    if result.get("openFiles"):
        print(limits.describe(result["openFiles"]))
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
        noted = f" ({', '.join(extra)})" if extra else ""
        print(f"{f['file']}: {f['imported']} events -> {f['session_key']}{noted}")
    for kind in ("problem", "note"):
        for p in result[kind + "s"]:
            where = f"{p['file']}:{p['line']}" if p["line"] else p["file"]
            print(f"{kind}: {where}: {p['message']}")
    rate = f", {result['eventsPerSecond']:,} events/s" if result["eventsPerSecond"] else ""
    print(f"imported {result['events']} events in {result['sessions']} sessions, {len(result['problems'])} "
          f"problem(s), {result['seconds']} s{rate}; run `sessionsearch reconcile` or a worker to index them")


class Progress:
    """A one-line progress bar on a terminal; silent when output is not a terminal."""

    def __init__(self, label: str, stream: IO[str] = sys.stderr, unit: str = "") -> None:
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


def _print_optimize(result: dict[str, Any]) -> None:
    for agent, done in result["agents"].items():
        words = done["words"]
        print(f"{agent}: postings for {len(words)} common word(s)"
              + (": " + ", ".join(f"{w} ({v['rows']:,} rows)" for w, v in words.items()) if words else "")
              + (f"; dropped {', '.join(done['dropped'])}" if done["dropped"] else "")
              + (f"; postings for {p['count']} prefix(es), {p['rows']:,} rows" if (p := done.get("prefixes")) else ""))


def _print_token(result: dict[str, Any]) -> None:
    print(f"token (give it to the client; it is not stored anywhere):\n  {result['token']}\n")
    print("add to the config file (SESSIONSEARCH_CONFIG) and restart the web processes:\n")
    print(result["toml"], end="")




# --- the data dir a command names ------------------------------------------------------------------

# the commands that read a store which must already exist (a mistyped --data-dir would otherwise
# be created empty, and a search in it answer "no matches"), and those that create one
READS_A_DATA_DIR = frozenset({"search", "history", "status", "reconcile", "optimize"})
MAKES_A_DATA_DIR = frozenset({"import", "serve", "demo", "worker", "mcp"})
DATA_DIR_FROM = "--data-dir or SESSIONSEARCH_DATA_DIR"


def check_data_dir(args: argparse.Namespace) -> None:
    """Refuse a data dir that is not there for a command that reads one, and create it for a command
    that writes one (an error naming the OS reason, rather than a traceback from deep inside)."""
    if args.command not in READS_A_DATA_DIR | MAKES_A_DATA_DIR:
        return
    settings = _settings(args)
    if settings.database_url:  # the PostgreSQL shape keeps nothing in the data dir
        return
    path = Path(settings.data_dir).absolute()
    if args.command in READS_A_DATA_DIR:
        if not path.is_dir():
            raise InvalidRequest(f"no data dir at {path} ({DATA_DIR_FROM}): check the path, or create one with "
                                 "`sessionsearch import` or `sessionsearch serve`", field="data_dir")
        return
    try:
        (path / "agents").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidRequest(f"cannot create the data dir {path} ({DATA_DIR_FROM}): "
                             f"{exc.strerror or exc}", field="data_dir") from None
    if not os.access(path / "agents", os.W_OK):
        raise InvalidRequest(f"the data dir {path} ({DATA_DIR_FROM}) is not writable", field="data_dir")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_data_dir(args)
        return COMMANDS[args.command](args)
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
