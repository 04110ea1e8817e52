"""Transcript storage: schema, migrations and the primitive reads and writes, per backend.

`backend_for(settings)` is the one place a backend is chosen; everything above talks to the
interfaces in base.py.
"""

from __future__ import annotations

from pathlib import Path

from ..settings import Settings
from .base import (
    AgentStore,
    AppendResult,
    Backend,
    ClaimInfo,
    Match,
    ReconcileOutcome,
    SessionMeta,
    WindowMeta,
)
from .sqlite import SqliteAgentStore, SqliteBackend
from .urls import check_database_url, redact


def backend_for(settings: Settings, *, data_dir: str | Path | None = None, rows_in_sql: bool = False) -> Backend:
    """The backend the settings name: PostgreSQL when `database_url` is set (postgresql:// or
    postgres://; any other scheme raises InvalidRequest), else SQLite files under `data_dir`
    (default: the setting).

    `rows_in_sql`: reconciliation inserts index rows with one INSERT … SELECT (what a worker
    process uses). Builds no connection: the backend's `open` and `open_store` do.
    """
    if settings.database_url:
        url = check_database_url(settings.database_url)
        from .postgres import PgBackend  # psycopg is imported only when PostgreSQL is used

        return PgBackend(url, settings, pool_size=settings.database_pool_max_connections)
    return SqliteBackend(Path(data_dir if data_dir is not None else settings.data_dir), settings,
                         rows_in_sql=rows_in_sql)


__all__ = ["AgentStore", "AppendResult", "Backend", "ClaimInfo", "Match", "ReconcileOutcome", "SessionMeta",
           "SqliteAgentStore",
           "SqliteBackend", "WindowMeta", "backend_for", "check_database_url", "redact"]
