"""Numbered migrations of the PostgreSQL store (migrations.py), recorded in
`ss_schema_migrations` and applied once, under an advisory lock, however many processes start
at the same time.
"""

from __future__ import annotations

import psycopg

from .db import the_row
from .migrations import MIGRATIONS

# the advisory lock key every migrating process takes (any fixed bigint; "sessions" in ASCII)
LOCK_KEY = 0x73657373696F6E73

LATEST = MIGRATIONS[-1][0]


async def applied_version(conn: psycopg.AsyncConnection) -> int:
    """The highest migration recorded in the database; 0 for a database never migrated."""
    if not (await the_row(conn, "SELECT to_regclass('ss_schema_migrations') IS NOT NULL"))[0]:
        return 0
    version: int = (await the_row(conn, "SELECT coalesce(max(version), 0) FROM ss_schema_migrations"))[0]
    return version


async def migrate_connection(conn: psycopg.AsyncConnection) -> tuple[int, int]:
    """Apply the migrations not yet recorded, all in one transaction under a transaction-level
    advisory lock (which, unlike a session lock, holds behind PgBouncer's transaction pooling):
    a second process waits, then finds them recorded. (version before, version after)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        await conn.execute("CREATE TABLE IF NOT EXISTS ss_schema_migrations (version integer PRIMARY KEY, "
                           "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        before = await applied_version(conn)
        for version, name, script in MIGRATIONS:
            if version <= before:
                continue
            await conn.execute(script)  # several statements: no parameters
            await conn.execute("INSERT INTO ss_schema_migrations (version, name) VALUES (%s, %s)", (version, name))
        return before, await applied_version(conn)


async def migrate(url: str) -> tuple[int, int]:
    """Bring the database at `url` to the latest schema: (version before, version after)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=None) as conn:
        return await migrate_connection(conn)


async def schema_version(url: str) -> int:
    """The schema version the database at `url` is at (0: never migrated)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=None) as conn:
        return await applied_version(conn)
