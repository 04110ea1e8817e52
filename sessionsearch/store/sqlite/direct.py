"""A borrowed reader's sqlite3 connection behind aiosqlite's face, run on the calling thread: what
lets a search of many agents run their statements on one thread in one hop (search_many.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

T = TypeVar("T")


class DirectConnection:
    """aiosqlite's face (what the search modules call) over a borrowed reader's own sqlite3
    connection, run on the calling thread: a search of many agents runs their statements on one
    thread in one hop (search_tops) rather than hopping to each reader's thread per statement."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    async def execute(self, sql: str, params: Any = None) -> sqlite3.Cursor:
        return self._conn.execute(sql, params or ())

    async def execute_fetchall(self, sql: str, params: Any = None) -> list[Any]:
        return self._conn.execute(sql, params or ()).fetchall()


def drive_direct(coro: Coroutine[Any, Any, T]) -> T:
    """The value of a coroutine that never suspends (its awaits are DirectConnection's), run to its end here."""
    try:
        coro.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    coro.close()
    raise RuntimeError("a direct search awaited something other than its connection")
