"""Visiting the agents of a search of many: a few at once (bounded), and by relevance best first
while an agent left may still hold a top hit (best_first)."""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

from ..store.base import ScoreBound

S = TypeVar("S")
R = TypeVar("R")
FIRST_VISITS = 8  # agents best_first visits in its first hop; each hop after visits twice as many


class MetaChanged(Exception):
    """An agent's session metadata changed since the catalog was read; scope again."""

    def __init__(self, agent_id: str) -> None:
        super().__init__(agent_id)
        self.agent_id = agent_id


async def bounded(each: Callable[[S], Awaitable[R]], items: Sequence[S], limit: int) -> list[R]:
    """`each` of every item, at most `limit` awaited at once, the answers in the items' order.

    A search of every agent holds one statement per agent: sent all at once, a thousand agents are a
    thousand reader threads (SQLite) or a thousand queries queued on a pool of ten (PostgreSQL). After
    a failure (MetaChanged: the caller scopes again) no item is started; the ones running finish, as
    gather's did, and the first failure is raised.
    """
    if len(items) == 1:
        return [await each(items[0])]
    answers: list[R] = [None] * len(items)  # type: ignore[list-item]
    turns = iter(enumerate(items))
    failed: list[BaseException] = []

    async def worker() -> None:
        for i, item in turns:  # one iterator shared: each item is taken once
            if failed:
                return
            try:
                answers[i] = await each(item)
            except Exception as exc:
                failed.append(exc)
                return

    await asyncio.gather(*(worker() for _ in range(max(1, min(limit, len(items))))))
    if failed:
        raise failed[0]
    return answers


async def best_first(visit: Callable[[list[S]], Awaitable[list[R]]], items: list[S], bounds: list[ScoreBound], *,
                     k: int, batch: int, fanout: int, first: int = FIRST_VISITS, ranks: Callable[[R], Iterable[float]],
                     passed: Callable[[S, ScoreBound], R]) -> list[R]:
    """`visit` (a hop of items, their answers in order) of the items that may hold one of the `k`
    best hits by relevance, the others answered by `passed(item, its bound)`; `ranks`: the bm25
    (lower is better) of an answer's hits. `bounds[i]` bounds item i's scores (-bm25) from above.

    Items whose bound is unknown are visited first, `batch` a hop and `fanout` hops at once; then
    those with a bound, highest first, `first` in the first hop and twice as many each hop
    after, up to `batch`, one hop at a time; none is visited once `k` hits in hand rank better than
    it can (its bound below the k-th best score in hand: a hit as good as the k-th could still win
    its tie, so the bound must be beaten, not met). Items that match nothing are passed at once.
    Exact: every hit of an item passed over ranks below `k` hits in hand, so below the top k.
    """
    answers: list[R | None] = [None] * len(items)
    best: list[float] = []  # max-heap (negated) of the k best ranks in hand

    def take(index: list[int], found: list[R]) -> None:
        for i, answer in zip(index, found, strict=True):
            answers[i] = answer
            for rank in ranks(answer):
                if len(best) < k:
                    heapq.heappush(best, -rank)
                elif rank < -best[0]:
                    heapq.heapreplace(best, -rank)

    unknown = [i for i, b in enumerate(bounds) if b.bound == math.inf]
    known = sorted((i for i, b in enumerate(bounds) if -math.inf < b.bound < math.inf), key=lambda i: -bounds[i].bound)
    hops = [unknown[j:j + batch] for j in range(0, len(unknown), batch)]
    for index, found in zip(hops, await bounded(lambda index: visit([items[i] for i in index]), hops, fanout),
                            strict=True):
        take(index, found)
    at, size = 0, min(first, batch)
    while at < len(known) and not (len(best) >= k and -bounds[known[at]].bound > -best[0]):
        index = known[at:at + size]
        take(index, await visit([items[i] for i in index]))
        at, size = at + size, min(batch, 2 * size)
    return [answer if answer is not None else passed(item, bound)
            for item, bound, answer in zip(items, bounds, answers, strict=True)]
