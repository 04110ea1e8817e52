"""Builders for transcript events in the gateway's format, an engine opener, and the polling waits."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sessionsearch import Engine, Settings

BASE_TS = 1767323045000
AUTO = object()


def msg(mid: str, role: str, text: Any, parent: Any = AUTO, ts: int | None = None, **extra: Any) -> dict:
    """A message event at `ts` (epoch ms, BASE_TS by default: the event's time, which a hit takes, and
    the message's inner one, as the runtime writes both); parent AUTO leaves parentId out (an older
    writer's parentless row)."""
    ts = BASE_TS if ts is None else ts
    try:
        stamp = iso_ms(ts)
    except (OverflowError, ValueError):  # no time at all (NaN, 1e30): a test of the inner stamp's check
        stamp = iso_ms(BASE_TS)
    event = {"type": "message", "id": mid, "timestamp": stamp,
             "message": {"role": role, "content": text, "timestamp": ts}}
    if parent is not AUTO:
        event["parentId"] = parent
    event.update(extra)
    return event


def iso_ms(ts: int) -> str:
    """Epoch milliseconds as the runtime writes an event's time: `2026-01-02T03:04:05.000Z`."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ts)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def chain(prefix: str, texts: list[tuple[str, str]], parent: str | None = None, ts: int = BASE_TS) -> list[dict]:
    """Messages m1..mn, each the child of the previous one (the first a child of `parent`)."""
    out = []
    for i, (role, text) in enumerate(texts, 1):
        mid = f"{prefix}{i}"
        out.append(msg(mid, role, text, parent, ts=ts + i))
        parent = mid
    return out


def timed(prefix: str, items: list[tuple[str, str, int]]) -> list[dict]:
    """Messages m1..mn in a chain with explicit timestamps: (role, text, ts)."""
    out, parent = [], None
    for i, (role, text, ts) in enumerate(items, 1):
        out.append(msg(f"{prefix}{i}", role, text, parent, ts=ts))
        parent = f"{prefix}{i}"
    return out


def header(session_id: str) -> dict:
    return {"type": "session", "version": 3, "id": session_id, "timestamp": "2026-01-02T03:04:05Z"}


def leaf(lid: str, parent: str, target: str) -> dict:
    return {"type": "leaf", "id": lid, "parentId": parent, "targetId": target}


def reset(rid: str, parent: str, kept: str | None = None, reason: str = "reset") -> dict:
    event = {"type": "reset", "id": rid, "parentId": parent, "timestamp": "2026-01-02T03:04:05Z", "reason": reason}
    if kept is not None:
        event["firstKeptEntryId"] = kept
    return event


@dataclass(frozen=True)
class Where:
    """A test's store (the `backend` fixture): SQLite files in `data_dir`, or PostgreSQL at
    `database_url` (data_dir then holds only what is not in the database)."""

    kind: str
    data_dir: Path
    database_url: str | None

    def settings(self, **extra: Any) -> Settings:
        return Settings(data_dir=str(self.data_dir), database_url=self.database_url, **extra)

    def env(self) -> dict[str, str]:
        """The environment a subprocess (server, worker, CLI) needs to use the same store."""
        env = {"SESSIONSEARCH_DATA_DIR": str(self.data_dir)}
        if self.database_url:
            env["SESSIONSEARCH_DATABASE_URL"] = self.database_url
        return env

    def __truediv__(self, name: str) -> Path:  # tests that kept `tmp_path / ...` for side files
        return self.data_dir / name


@asynccontextmanager
async def engine_at(path, **settings: Any):
    """An open Engine on `path` (a data dir) or on a `Where` (the backend fixture)."""
    if isinstance(path, Where):
        engine = Engine(path.data_dir, settings=path.settings(**settings))
    else:
        engine = Engine(path, settings=Settings(data_dir=str(path), **settings))
    await engine.open()
    try:
        yield engine
    finally:
        await engine.close()


def ids(result: dict) -> list[str]:
    return [hit["messageId"] for hit in result["results"]]


async def sql_rows(store, sqlite_sql: str, pg_sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of a read on the store's own tables, in its backend's SQL (checks in tests only)."""
    async with store.reader() as reader:
        if hasattr(reader, "all"):  # PostgreSQL's reader
            return [tuple(r) for r in await reader.all(pg_sql, params or None)]
        return [tuple(r) for r in await reader.conn.execute_fetchall(sqlite_sql, params)]


def _failed(timeout: float, what: str | Callable[[], str]) -> AssertionError:
    said = what() if callable(what) else what
    return AssertionError(f"timed out after {timeout:g} s waiting for {said}")


def wait_until(predicate: Callable[[], Any], timeout: float = 60, what: str | Callable[[], str] = "the condition",
               *, every: float = 0.05) -> Any:
    """Poll `predicate()` every `every` seconds until it returns something truthy, and return that.

    Fails the test once `timeout` seconds have passed (the timeout only tells "done" from "stuck",
    never how fast); `what` names what was awaited, or is called then for the message (a log's tail).
    An assertion inside `predicate` fails the test at once."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _failed(timeout, what)
        time.sleep(every)


async def until(predicate: Callable[[], Any], timeout: float = 60, what: str | Callable[[], str] = "the condition",
                *, every: float = 0.05) -> Any:
    """`wait_until` for async tests: the event loop runs between polls; `predicate` may be async."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise _failed(timeout, what)
        await asyncio.sleep(every)


def undo_meaning_index(conn) -> None:
    """Take SQLite migration 15 (the meaning index), and 16 to 18 after it (the score bounds, their
    log, the packed embeddings), out of a store a test rewrites as an older version."""
    for statement in ("DROP TABLE vec_fold", "DROP TABLE vec_blocks", "DELETE FROM schema_migrations WHERE version = 18",
                      "DROP TABLE bounds_log", "DELETE FROM schema_migrations WHERE version = 17",
                      "DELETE FROM meta WHERE key IN ('bounds_rows', 'bounds_tokens')",
                      "DROP TABLE term_bounds", "DROP TABLE bounds_state",
                      "DELETE FROM schema_migrations WHERE version = 16",
                      "DROP TRIGGER embeddings_gone", "DROP TABLE embed_gone", "DROP TABLE embeddings",
                      "DROP TABLE embed_models", "DELETE FROM meta WHERE key IN ('embed_model', 'embed_seq')",
                      "DROP INDEX windows_embed", "ALTER TABLE windows DROP COLUMN needs_embed",
                      "ALTER TABLE windows DROP COLUMN embed_token", "ALTER TABLE windows DROP COLUMN embed_expires_at",
                      "DELETE FROM schema_migrations WHERE version = 15"):
        conn.execute(statement)


def undo_pg_meaning_index(conn) -> None:
    """Take PostgreSQL migrations 12 (the meaning index), 13 and 14 (score bounds, kept by the
    writes), 15 (the packed embeddings), 16 (the spawn tree's index) and 17 (embed claims), which come
    after it, out of a database a test rewrites as an older version."""
    for statement in ("DROP TABLE ss_embed_claims", "DELETE FROM ss_schema_migrations WHERE version = 17",
                      "DROP INDEX ss_sessions_spawned_by", "DELETE FROM ss_schema_migrations WHERE version = 16",
                      "DROP TABLE ss_vec_folds, ss_vec_blocks", "DELETE FROM ss_schema_migrations WHERE version = 15",
                      "DROP TRIGGER ss_agents_bounds ON ss_agents", "DROP FUNCTION ss_bounds_of_new_agent()",
                      "DROP TRIGGER ss_index_bounds ON ss_index", "DROP FUNCTION ss_bounds_keep()",
                      "DELETE FROM ss_schema_migrations WHERE version = 14",
                      "DROP TABLE ss_term_bounds, ss_bounds_built", "DELETE FROM ss_schema_migrations WHERE version = 13",
                      "DROP TRIGGER ss_embeddings_gone ON ss_embeddings", "DROP FUNCTION ss_embed_gone()",
                      "DROP TABLE ss_embed_gone, ss_embeddings, ss_embed_models",
                      "ALTER TABLE ss_agents DROP COLUMN embed_model, DROP COLUMN embed_seq",
                      "DROP INDEX ss_windows_embed", "ALTER TABLE ss_windows DROP COLUMN needs_embed, "
                      "DROP COLUMN embed_token, DROP COLUMN embed_expires_at",
                      "DELETE FROM ss_schema_migrations WHERE version = 12"):
        conn.execute(statement)


@asynccontextmanager
async def sweeping(settings: Settings):
    """The settings' queue (`Pipeline`) and a worker's `Sweeper` over it, both closed after."""
    from sessionsearch.queue import Pipeline
    from sessionsearch.worker.sweep import Sweeper

    pipeline = Pipeline(settings)
    sweeper = Sweeper(settings, pipeline.reconciler)
    try:
        yield pipeline, sweeper
    finally:
        await sweeper.aclose()
        pipeline.close()
