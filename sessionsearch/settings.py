"""One declared table of settings, read once at process entry (environment, then TOML, then flags).

Each setting has a name with its unit, a default, help text, the environment variable that sets it
and, where the gateway has a name for it, the dotted TOML path the gateway uses.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .errors import InvalidRequest


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    help: str
    env: str | None = None
    toml: str | None = None  # dotted path in the config file
    parse: Callable[[str], Any] = str
    # a TOML value that is not a scalar (an array of tables): checks it, given the value and the file
    toml_value: Callable[[Any, str], Any] | None = None


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


def _scoped_tokens(value: Any, where: str) -> tuple:
    from .auth import parse_scoped_tokens  # here: auth needs the search package, which needs settings

    return parse_scoped_tokens(value, where)


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, not {text!r}")
        return text
    return parse


SETTINGS: tuple[Setting, ...] = (
    Setting("data_dir", "./data", "Directory holding one SQLite database per agent.",
            env="SESSIONSEARCH_DATA_DIR"),
    Setting("host", "127.0.0.1", "Address the HTTP server binds.", env="SESSIONSEARCH_HOST"),
    # PostgreSQL, the scale-out shape (SPEC §1); docs/postgres-ops.md
    Setting("database_url", None,
            "PostgreSQL URL of the transcript store (postgresql://user:password@host:5432/db); unset keeps one "
            "SQLite file per agent under data_dir. Its password is never logged or printed.",
            env="SESSIONSEARCH_DATABASE_URL", toml="database.url"),
    Setting("database_pool_max_connections", 10,
            "PostgreSQL connections each process (web, worker, CLI) may hold at most.",
            env="SESSIONSEARCH_DATABASE_POOL_MAX_CONNECTIONS", toml="database.poolMaxConnections",
            parse=_whole("connections", 1, "1 connection")),
    Setting("port", 8780, "Port the HTTP server binds.", env="SESSIONSEARCH_PORT", parse=int),
    Setting("redis_url", None, "Redis broker URL; unset runs reconciliation in-process (embedded).",
            env="SESSIONSEARCH_REDIS_URL"),
    Setting("redis_request_timeout_ms", 200,
            "Milliseconds a request waits on Redis (a search's enqueue, /readyz, /metrics) before it answers "
            "without it.", env="SESSIONSEARCH_REDIS_REQUEST_TIMEOUT_MS", parse=_positive_ms),
    Setting("api_token", None, "Bearer token required on the HTTP API; unset binds loopback only.",
            env="SESSIONSEARCH_API_TOKEN"),
    Setting("auth_tokens", (),
            "Scoped tokens, each bound to one requester: [[auth.tokens]] token_sha256, requester, sandboxed "
            "(`sessionsearch token new` prints an entry).", toml="auth.tokens", toml_value=_scoped_tokens),
    Setting("log_level", "INFO", "Log level of the JSON logs.", env="SESSIONSEARCH_LOG_LEVEL"),
    # visibility (SPEC §6), named as the gateway names them
    Setting("visibility", "all", "Which sessions a requester may search: all, agent, tree or self.",
            env="SESSIONSEARCH_VISIBILITY", toml="tools.sessions.visibility",
            parse=_choice("all", "agent", "tree", "self")),
    Setting("agent_to_agent_enabled", True, "Whether requesters may reach other agents' sessions.",
            env="SESSIONSEARCH_AGENT_TO_AGENT_ENABLED", toml="tools.agentToAgent.enabled", parse=_bool),
    Setting("agent_to_agent_allow", (), "Agent ids allowed cross-agent (`*` wildcards); empty = all.",
            env="SESSIONSEARCH_AGENT_TO_AGENT_ALLOW", toml="tools.agentToAgent.allow", parse=_list),
    Setting("sandbox_session_tools_visibility", "spawned",
            "What sandboxed requesters see: spawned (themselves and what they spawned) or all.",
            env="SESSIONSEARCH_SANDBOX_SESSION_TOOLS_VISIBILITY",
            toml="agents.defaults.sandbox.sessionToolsVisibility", parse=_choice("spawned", "all")),
    # search (SPEC §4)
    Setting("redact_snippets", False, "Mask secrets (API keys, bearer tokens, KEY=value passwords) in snippets.",
            env="SESSIONSEARCH_REDACT_SNIPPETS", toml="search.redactSnippets", parse=_bool),
    Setting("search_time_limit_ms", 60_000, "Reader time budget of one search, admission included.",
            env="SESSIONSEARCH_SEARCH_TIME_LIMIT_MS", toml="search.timeLimitMs", parse=int),
    Setting("search_response_max_bytes", 32 * 1024, "JSON size budget of one search response.",
            toml="search.responseMaxBytes", parse=int),
    # the cost of one request (search/cost.py): refused or held back before any work starts
    Setting("search_max_query_terms", 32,
            "Search terms one query may hold (a token of each distinct word, each part of a hyphenated word, "
            "each character pair of a CJK run); more is refused (400).",
            env="SESSIONSEARCH_SEARCH_MAX_QUERY_TERMS", toml="search.maxQueryTerms",
            parse=_whole("terms", 1, "1 term")),
    Setting("search_max_request_terms", 64,
            "Search terms one request may hold, summed over its `queries` batch; more is refused (400).",
            env="SESSIONSEARCH_SEARCH_MAX_REQUEST_TERMS", toml="search.maxRequestTerms",
            parse=_whole("terms", 1, "1 term")),
    Setting("credential_max_concurrent", 2,
            "Agent-tool and MCP requests one scoped token may have running at once. All scoped tokens together "
            "have one fewer than the connections a search reads on (database_pool_max_connections; SQLite: "
            "readers_per_agent), so the operator always finds one.",
            env="SESSIONSEARCH_CREDENTIAL_MAX_CONCURRENT", toml="auth.maxConcurrentPerToken",
            parse=_whole("requests", 1, "1 request")),
    Setting("credential_queue_wait_ms", 5_000,
            "Milliseconds a scoped token's request past credential_max_concurrent waits for a turn before it "
            "is refused.", env="SESSIONSEARCH_CREDENTIAL_QUEUE_WAIT_MS", toml="auth.queueWaitMs",
            parse=_whole("milliseconds", 0, "0 ms")),
    Setting("credential_search_time_limit_ms", 10_000,
            "Time budget of one search a scoped token sends, admission included (at most search_time_limit_ms): "
            "how long one agent's request may hold a database connection.",
            env="SESSIONSEARCH_CREDENTIAL_SEARCH_TIME_LIMIT_MS", toml="auth.searchTimeLimitMs", parse=_positive_ms),
    Setting("list_response_max_bytes", 64 * 1024, "JSON size budget of one sessions.list response.",
            toml="list.responseMaxBytes", parse=int),
    Setting("snippet_max_units", 300, "Snippet length in UTF-16 code units (before the ellipsis).",
            toml="search.snippetMaxUnits", parse=int),
    Setting("readers_per_agent", 4, "Reader connections per agent database.",
            env="SESSIONSEARCH_READERS_PER_AGENT", toml="search.readersPerAgent", parse=int),
    Setting("reader_mmap_mb", 0, "MiB of each agent database a reader maps into memory (0: read() calls).",
            env="SESSIONSEARCH_READER_MMAP_MB", toml="search.readerMmapMb", parse=_mib),
    Setting("reader_quiet_mmap_mb", 2048,
            "MiB of the database a reader maps while it goes unchanged (0: never; SQLite caps it at ~2 GiB).",
            env="SESSIONSEARCH_READER_QUIET_MMAP_MB", toml="search.readerQuietMmapMb", parse=_mib),
    # history (SPEC §5)
    Setting("history_max_bytes", 80 * 1024, "JSON size budget of one history response.",
            toml="history.maxBytes", parse=int),
    Setting("history_text_max_chars", 4000, "Message text longer than this is cut.",
            toml="history.textMaxChars", parse=int),
    Setting("history_row_max_bytes", 24 * 1024,
            "A message whose JSON is larger than this (after cutting text) is replaced by a placeholder.",
            toml="history.rowMaxBytes", parse=int),
    Setting("history_default_limit", 50, "Messages returned by a history read without `limit`.",
            toml="history.defaultLimit", parse=int),
    # reconciliation (SPEC §3, §8)
    Setting("reconcile_batch_rows", 5000, "Transcript rows per reconciliation batch transaction.",
            env="SESSIONSEARCH_RECONCILE_BATCH_ROWS", toml="reconcile.batchRows", parse=int),
    Setting("claim_lease_s", 60.0, "Seconds a reconciliation claim holds before another worker may take it.",
            env="SESSIONSEARCH_CLAIM_LEASE_S", toml="reconcile.claimLeaseS", parse=float),
    Setting("reconcile_sweep_every_s", 30.0,
            "Seconds between a worker's sweeps for windows needing reconciliation with no job queued or taken "
            "(0: at startup only).", env="SESSIONSEARCH_RECONCILE_SWEEP_EVERY_S", toml="reconcile.sweepEveryS",
            parse=_seconds),
    Setting("reconcile_slots", 1,
            "PostgreSQL: reconciliation transactions doing their work (reading, tokenizing, writing index rows) at once "
            "against the database, from every worker process and host (0: no limit); the server's other cores stay "
            "with searches and appends.",
            env="SESSIONSEARCH_RECONCILE_SLOTS", toml="reconcile.slots", parse=_whole("transactions", 0, "0")),
    Setting("postings_min_docs", None,
            "`optimize` gives postings to words in at least this many messages (unset: 500 on SQLite, "
            "5000 on PostgreSQL), and 0.05% (SQLite) or 0.5% (PostgreSQL) of them.",
            env="SESSIONSEARCH_POSTINGS_MIN_DOCS", toml="search.postingsMinDocs", parse=int),
    Setting("optimize_every_s", 3600.0,
            "Seconds between rebuilds of the common words' postings by `worker` and embedded `serve` (0: never).",
            env="SESSIONSEARCH_OPTIMIZE_EVERY_S", toml="search.optimizeEveryS", parse=float),
    Setting("postings_check_every_s", 30.0,
            "Seconds between checks whether an agent's postings would pay off (a reconciliation backlog drained, "
            "the index grew by postingsGrowShare, words about to lose theirs); 0: the hourly rebuild only.",
            env="SESSIONSEARCH_POSTINGS_CHECK_EVERY_S", toml="search.postingsCheckEveryS", parse=float),
    Setting("postings_grow_share", 0.2,
            "Build postings again once an agent's index has grown by this share of its rows at the last build.",
            env="SESSIONSEARCH_POSTINGS_GROW_SHARE", toml="search.postingsGrowShare", parse=float),
    Setting("worker_cpu_priority", "idle",
            "CPU scheduling of worker processes: idle (reconcile on CPU time that searches and appends "
            "leave) or normal.", env="SESSIONSEARCH_WORKER_CPU_PRIORITY", toml="reconcile.cpuPriority",
            parse=_choice("idle", "normal")),
)

_BY_NAME = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class Settings:
    """Resolved settings; build with `Settings.load()` at process entry, or directly in tests."""

    data_dir: str = "./data"
    host: str = "127.0.0.1"
    database_url: str | None = field(default=None, repr=False)  # holds a password: kept out of reprs
    database_pool_max_connections: int = 10
    port: int = 8780
    redis_url: str | None = None
    redis_request_timeout_ms: int = 200
    api_token: str | None = None
    auth_tokens: tuple = ()  # of auth.ScopedToken
    log_level: str = "INFO"
    visibility: str = "all"
    agent_to_agent_enabled: bool = True
    agent_to_agent_allow: tuple[str, ...] = ()
    sandbox_session_tools_visibility: str = "spawned"
    redact_snippets: bool = False
    search_time_limit_ms: int = 60_000
    search_response_max_bytes: int = 32 * 1024
    search_max_query_terms: int = 32
    search_max_request_terms: int = 64
    credential_max_concurrent: int = 2
    credential_queue_wait_ms: int = 5_000
    credential_search_time_limit_ms: int = 10_000
    list_response_max_bytes: int = 64 * 1024
    snippet_max_units: int = 300
    readers_per_agent: int = 4
    reader_mmap_mb: int = 0
    reader_quiet_mmap_mb: int = 2048
    history_max_bytes: int = 80 * 1024
    history_text_max_chars: int = 4000
    history_row_max_bytes: int = 24 * 1024
    history_default_limit: int = 50
    reconcile_batch_rows: int = 5000
    claim_lease_s: float = 60.0
    reconcile_sweep_every_s: float = 30.0
    reconcile_slots: int = 1
    postings_min_docs: int | None = None  # None: the backend's own
    optimize_every_s: float = 3600.0
    postings_check_every_s: float = 30.0
    postings_grow_share: float = 0.2
    worker_cpu_priority: str = "idle"
    config_path: str | None = field(default=None)

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)

    @classmethod
    def load(cls, *, config: str | None = None, env: dict[str, str] | None = None,
             **overrides: Any) -> "Settings":
        """Resolve settings: defaults < config file < environment < explicit overrides (flags).

        Raises InvalidRequest naming the setting and its source when a value does not parse.
        """
        env = dict(os.environ) if env is None else env
        values: dict[str, Any] = {}
        config = config or env.get("SESSIONSEARCH_CONFIG")
        if config:
            values.update(_from_toml(Path(config)))
        for s in SETTINGS:
            if s.env and env.get(s.env) not in (None, ""):
                values[s.name] = _parse(s, env[s.env], s.env)
        for name, value in overrides.items():
            if value is not None:
                if name not in _BY_NAME:
                    raise InvalidRequest(f"unknown setting {name!r}", field=name)
                values[name] = value
        if "agent_to_agent_allow" in values:
            values["agent_to_agent_allow"] = tuple(values["agent_to_agent_allow"])
        return cls(config_path=config, **values)


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
    expected = str if s.default is None else type(s.default)  # an unset-by-default setting takes text
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
        raise InvalidRequest(f"{where} must be a {expected.__name__}", field=s.toml)
    if isinstance(value, str) or s.parse not in (str, int, float):  # a number with a range checks it too
        return _parse(s, str(value), where)
    return value
