"""Many agents' stores at once: their search statements (search_tops) and score bounds
(score_bounds) run on one thread a hop, and
at most open_agents_max stores hold open files and threads (OpenBudget)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..base import Match, ScoreBound, TopHits
from .bounds import BoundQuery
from .newest import stamp_of

if TYPE_CHECKING:
    from .search import _Reader
    from .store import SqliteAgentStore

T = TypeVar("T")
A = TypeVar("A")


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
    one worker thread, `at_once` stores a hop (hops)."""
    def one(store: SqliteAgentStore, reader: _Reader, scope: tuple[list[int] | None, list[int]]) -> TopHits:
        top = store.search_top_direct(reader, match, include=scope[0], exclude=scope[1], **same)
        assert top is not None  # None only where `ties` is False
        return top

    return await hops(stores, list(scopes), one, deadline=deadline, at_once=at_once)


async def score_bounds(stores: Sequence[SqliteAgentStore], query: BoundQuery, *, deadline: float,
                       at_once: int, threads: int) -> list[ScoreBound]:
    """Each store's ScoreBound for `query` (bounds.py): from what the store keeps while its files
    are unchanged (bounds.Known), else read, the stores to read split in `threads` parts whose hops
    run at once (sqlite3 lets go of the interpreter lock while a statement steps, and the
    statements are most of a hop), at most `at_once` stores in all at a time (OpenBudget: a part
    per hop of its own would hold every store at once)."""
    stamped_at = time.time()
    stamps = [stamp_of(store.path) for store in stores]
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


async def hops(stores: Sequence[SqliteAgentStore], args: list[A], one: Callable[[SqliteAgentStore, _Reader, A], T],
               *, deadline: float, at_once: int) -> list[T]:
    """`one(store, reader, arg)` of each store and its arg, on one worker thread, `at_once` stores
    a hop, each over a reader borrowed from its store for the hop (so at most `at_once` stores are
    held open by it: OpenBudget)."""
    found: list[T] = []
    for start in range(0, len(stores), max(1, at_once)):
        chunk = list(zip(stores[start:start + at_once], args[start:start + at_once], strict=True))
        async with AsyncExitStack() as stack:  # an interrupt leaves through every reader: SearchTimeout
            readers = [await stack.enter_async_context(store.reader(deadline)) for store, _ in chunk]

            def run(chunk: list[tuple[SqliteAgentStore, A]] = chunk, readers: list[_Reader] = readers) -> list[T]:
                return [one(store, reader, arg) for (store, arg), reader in zip(chunk, readers, strict=True)]

            found += await asyncio.to_thread(run)
    return found


_LIVE: weakref.WeakSet[OpenBudget] = weakref.WeakSet()  # this process's budgets, one a SQLite backend


class OpenBudget:
    """At most `most` agent stores hold open files and threads at once: a store about to use its
    connections is admitted, and the least recently admitted idle ones past the bound release
    theirs (SqliteAgentStore.release). A store in use (a reader borrowed, a write running) is never
    released; past the bound while all are in use, the next admission releases the surplus. An
    open that fails for want of files sheds every idle store (`shed`) and tries once more.

    `room` is what the process's open-file limit leaves room for (limits.py), shared equally by
    the process's budgets: one process may hold several SQLite backends (`serve`'s engine, its
    embedded worker's and its sweep's), each with a budget of its own event loop, and the file
    limit is the process's; `cap` (open_agents_max) bounds each. A budget shares from `enlist` (the
    backend opened) to `retire` (closed)."""

    def __init__(self, room: int, *, cap: int | None = None) -> None:
        self.room = max(1, room)
        self.cap = max(1, cap if cap is not None else room)
        self._open: OrderedDict[int, SqliteAgentStore] = OrderedDict()

    def enlist(self) -> None:
        """The backend opened: its share of the process's stores is taken from the others'."""
        _LIVE.add(self)

    @property
    def most(self) -> int:
        """This budget's share of the process's stores."""
        return max(1, min(self.cap, self.room // max(1, len(_LIVE))))

    def retire(self) -> None:
        """The backend closed: its share goes to the process's other budgets."""
        _LIVE.discard(self)

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
            # another admit may have released it while this one awaited a release (hops run at once)
            if other is not store and not other.busy and self._open.pop(key, None) is not None:
                await other.release()

    def forget(self, store: SqliteAgentStore) -> None:
        self._open.pop(id(store), None)

    async def shed(self, keep: SqliteAgentStore | None = None) -> int:
        """Release every idle store but `keep` (an open just failed for want of files); returns
        how many were released."""
        released = 0
        for key, other in list(self._open.items()):
            if other is not keep and not other.busy and self._open.pop(key, None) is not None:
                await other.release()
                released += 1
        return released
