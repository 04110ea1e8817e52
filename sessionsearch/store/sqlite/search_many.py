"""Many agents' stores at once: their search statements (search_tops) and score bounds
(score_bounds) run on one thread a hop (within the stores OpenBudget, budget.py, lets be open)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
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
