"""Many agents' stores at once: their search statements (search_tops) and score bounds
(score_bounds) run on one thread a hop, and at most open_agents_max stores hold open files and
threads (OpenBudget, budget.py)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from ..base import Match, Newest, ScoreBound, TopHits
from .bounds import BoundQuery
from .newest import Stamp

T = TypeVar("T")
A = TypeVar("A")
# a store's reader (search.py's _Reader), handed back to the store's direct reads
_Reader = Any


class HopStore(Protocol):
    """What a hop reads of an agent's store (store.py's HopStore)."""

    path: Path

    def reader(self, deadline: float = ...) -> AbstractAsyncContextManager[_Reader]: ...

    def search_top_direct(self, reader: _Reader, match: Match, **args: Any) -> TopHits | None: ...

    def known_bound(self, query: BoundQuery, stamp: Stamp | None) -> ScoreBound | None: ...

    def score_bound_direct(self, reader: _Reader, query: BoundQuery, stamp: Stamp | None,
                           stamped_at: float) -> ScoreBound: ...

    def stamp(self) -> Stamp | None: ...

    def newest_kept(self) -> tuple[Stamp | None, Newest | None]: ...

    def newest_direct(self, reader: _Reader, stamp: Stamp | None, stamped_at: float) -> Newest: ...


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



async def search_tops(stores: Sequence[HopStore], match: Match, scopes: Sequence[tuple[list[int] | None,
                      list[int]]], *, deadline: float, at_once: int, **same: Any) -> list[TopHits]:
    """`search_top` of each store with its (include, exclude) scope and the `same` arguments, on
    one worker thread, `at_once` stores a hop (hops)."""
    def one(store: HopStore, reader: _Reader, scope: tuple[list[int] | None, list[int]]) -> TopHits:
        top = store.search_top_direct(reader, match, include=scope[0], exclude=scope[1], **same)
        assert top is not None  # None only where `ties` is False
        return top

    return await hops(stores, list(scopes), one, deadline=deadline, at_once=at_once)


async def score_bounds(stores: Sequence[HopStore], query: BoundQuery, *, deadline: float,
                       at_once: int, threads: int) -> list[ScoreBound]:
    """Each store's ScoreBound for `query` (bounds.py): from what the store keeps while its files
    are unchanged (bounds.Known), else read, the stores to read split in `threads` parts whose hops
    run at once (sqlite3 lets go of the interpreter lock while a statement steps, and the
    statements are most of a hop), at most `at_once` stores in all at a time (OpenBudget: a part
    per hop of its own would hold every store at once)."""
    stamped_at = time.time()
    stamps = [store.stamp() for store in stores]
    found: list[ScoreBound | None] = [store.known_bound(query, stamp) for store, stamp in zip(stores, stamps)]
    todo = [i for i, bound in enumerate(found) if bound is None]
    if not todo:
        return cast(list[ScoreBound], found)
    threads = max(1, min(threads, at_once, len(todo)))
    size = max(1, at_once // threads)  # stores a hop of each part
    per_part = -(-len(todo) // threads)
    parts = [todo[i:i + per_part] for i in range(0, len(todo), per_part)]

    async def part(index: list[int]) -> list[ScoreBound]:
        return await hops([stores[i] for i in index], [stamps[i] for i in index],
                          lambda store, reader, stamp: store.score_bound_direct(reader, query, stamp, stamped_at),
                          deadline=deadline, at_once=size)

    for index, bounds in zip(parts, await asyncio.gather(*(part(index) for index in parts)), strict=True):
        for i, bound in zip(index, bounds, strict=True):
            found[i] = bound
    return cast(list[ScoreBound], found)  # every one known or read


async def newests(stores: Sequence[HopStore], *, deadline: float, at_once: int) -> list[Newest]:
    """Each store's Newest (newest.py): from memory while its files are unchanged, the others read
    on one worker thread, `at_once` stores a hop. Read one by one, each a hop to its reader's
    thread, the agents written in the last second (13-67 of 1,000 under 10 writes a second) cost
    a search by `recent` 15-40 ms at a load of 14."""
    stamped_at = time.time()
    found = [store.newest_kept() for store in stores]
    todo = [i for i, (_, kept) in enumerate(found) if kept is None]
    read = await hops([stores[i] for i in todo], [found[i][0] for i in todo],
                      lambda store, reader, stamp: store.newest_direct(reader, stamp, stamped_at),
                      deadline=deadline, at_once=at_once) if todo else []
    newest = [kept for _, kept in found]
    for i, one in zip(todo, read, strict=True):
        newest[i] = one
    return cast(list[Newest], newest)  # every one kept or read


async def hops(stores: Sequence[HopStore], args: list[A], one: Callable[[HopStore, _Reader, A], T],
               *, deadline: float, at_once: int) -> list[T]:
    """`one(store, reader, arg)` of each store and its arg, on one worker thread, `at_once` stores
    a hop, each over a reader borrowed from its store for the hop (so at most `at_once` stores are
    held open by it: OpenBudget)."""
    found: list[T] = []
    for start in range(0, len(stores), max(1, at_once)):
        chunk = list(zip(stores[start:start + at_once], args[start:start + at_once], strict=True))
        async with AsyncExitStack() as stack:  # an interrupt leaves through every reader: SearchTimeout
            readers = [await stack.enter_async_context(store.reader(deadline)) for store, _ in chunk]

            def run(chunk: list[tuple[HopStore, A]] = chunk, readers: list[_Reader] = readers) -> list[T]:
                return [one(store, reader, arg) for (store, arg), reader in zip(chunk, readers, strict=True)]

            found += await asyncio.to_thread(run)
    return found
