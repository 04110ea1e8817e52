"""Many agents' stores at once: their search statements run on one thread a hop (search_tops), and
at most open_agents_max stores hold open files and threads (OpenBudget)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import OrderedDict
from collections.abc import Coroutine, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..base import Match, TopHits

if TYPE_CHECKING:
    from .store import SqliteAgentStore, _Reader

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


async def search_tops(stores: Sequence[SqliteAgentStore], match: Match, scopes: Sequence[tuple[list[int] | None,
                      list[int]]], *, deadline: float, at_once: int, **same: Any) -> list[TopHits]:
    """`search_top` of each store with its (include, exclude) scope and the `same` arguments, on
    one worker thread, `at_once` stores a hop, each over a reader borrowed from its store for the
    hop (so at most `at_once` stores are held open by it: OpenBudget)."""
    found: list[TopHits] = []
    for start in range(0, len(stores), max(1, at_once)):
        chunk = list(zip(stores[start:start + at_once], scopes[start:start + at_once], strict=True))
        async with AsyncExitStack() as stack:  # an interrupt leaves through every reader: SearchTimeout
            readers = [await stack.enter_async_context(store.reader(deadline)) for store, _ in chunk]

            def run(chunk: list[tuple[SqliteAgentStore, tuple[list[int] | None, list[int]]]] = chunk,
                    readers: list[_Reader] = readers) -> list[TopHits]:
                tops = []
                for (store, (include, exclude)), reader in zip(chunk, readers, strict=True):
                    top = store.search_top_direct(reader, match, include=include, exclude=exclude, **same)
                    assert top is not None  # None only where `ties` is False
                    tops.append(top)
                return tops

            found += await asyncio.to_thread(run)
    return found


class OpenBudget:
    """At most `most` agent stores of a process hold open files and threads at once
    (open_agents_max): a store about to use its connections is admitted, and the least recently
    admitted idle ones past the bound release theirs (SqliteAgentStore.release). A store in use (a
    reader borrowed, a write running) is never released; past the bound while all are in use, the
    next admission releases the surplus."""

    def __init__(self, most: int) -> None:
        self.most = max(1, most)
        self._open: OrderedDict[int, SqliteAgentStore] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    async def admit(self, store: SqliteAgentStore) -> None:
        self._open[id(store)] = store
        self._open.move_to_end(id(store))
        if len(self._open) <= self.most:
            return
        for key, other in list(self._open.items()):
            if len(self._open) <= self.most:
                break
            if other is not store and not other.busy:
                del self._open[key]
                await other.release()

    def forget(self, store: SqliteAgentStore) -> None:
        self._open.pop(id(store), None)
