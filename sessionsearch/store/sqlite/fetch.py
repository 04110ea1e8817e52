"""A statement's rows through aiosqlite, typed as what they are."""

from __future__ import annotations

from typing import Any, cast

import aiosqlite


async def fetch_all(conn: aiosqlite.Connection, sql: str, params: Any = None) -> list[Any]:
    """A statement's rows (aiosqlite types them as an Iterable; they are a list)."""
    return cast(list[Any], await conn.execute_fetchall(sql, params))
