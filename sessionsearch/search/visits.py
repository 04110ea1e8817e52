"""Visiting the agents of a search of many: a few at once (bounded), by relevance best first
while an agent left may still hold a top hit (best_first), and by `recent` newest first while an
agent left may still hold a newer one (newest_first)."""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from ..store.base import Newest, ScoreBound
from .plan import Scope

S = TypeVar("S")
R = TypeVar("R")
A = TypeVar("A")
FIRST_VISITS = 8  # agents best_first visits in its first hop; each hop after visits twice as many
# agents newest_first searches one by one before it hands the rest to `rest`: about one round of
# the fanout (on PostgreSQL 32 alone were 8 rounds of statements, ~70 ms, before a word few agents
# hold reached the one statement of them all, which costs ~20)
VISITS_ALONE = 4


class MetaChanged(Exception):
    """An agent's session metadata changed since the catalog was read; scope again."""

    def __init__(self, agent_id: str) -> None:
        super().__init__(agent_id)
        self.agent_id = agent_id


class Versions(dict[str, int]):
    """The agents' meta versions a search scoped with (its catalog view's), and the agents read at
    another one since (`moved`): their answers stand as read, with the scopes planned from the view,
    and the caller checks once the search is done that the metadata as it is now scopes each agent
    to the same windows (runner.py), else it scopes again. A plain dict raises MetaChanged at once.

    Why: a gateway creates sessions all the time, and each bumps its agent's meta version. Raising
    at the first one searched every agent again: under 10 new sessions a second no search across
    1,000 agents got through without one, so each ran 5 times (4 attempts, then one unchecked),
    0.4-0.6 s where one run takes 40 ms."""

    def __init__(self, versions: Mapping[str, int]) -> None:
        super().__init__(versions)
        self.moved: set[str] = set()


def check_version(versions: dict[str, int] | None, agent_id: str, version: int) -> bool:
    """An agent was read at meta `version`: whether the search scoped it at that one; if not,
    MetaChanged, or (Versions) False and the agent noted as moved."""
    if versions is None or versions.get(agent_id) == version:
        return True
    if isinstance(versions, Versions):
        versions.moved.add(agent_id)
        return False
    raise MetaChanged(agent_id)


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


async def newest_first(each: Callable[[Scope], Awaitable[A]], scopes: list[Scope], *, known: Mapping[str, Newest],
                       versions: dict[str, int] | None, k: int, fanout: int,
                       times: Callable[[A], Iterable[int]], passed: Callable[[Scope, set[int]], A],
                       split: bool = False, rest: Callable[[list[Scope]], Awaitable[list[A | None]]] | None = None,
                       since: int | None = None, until: int | None = None,
                       matchless: Callable[[list[Scope]], Awaitable[set[str]]] | None = None,
                       hop: Callable[[list[Scope]], Awaitable[list[A]]] | None = None, batch: int = 50) -> list[A]:
    """`each` of the scopes for order "recent", the agents visited newest first by their Newest
    (`known`, read now), at most `fanout` at once, none started once `k` items (`times`: the
    timestamps of an answer's items) are newer than the newest message of every agent not
    visited yet; `passed(scope, dirty)` answers for an agent not visited (nothing, its windows in
    scope needing reconciliation). With `split`, past VISITS_ALONE agents, the agents `matchless`
    names (known to hold no match) are passed over, and `rest` answers for all the others at once
    (None for an agent: it holds no hit among them, passed as an agent not visited; no `rest`:
    they are visited as the first were). With `hop` (several agents' answers in one hop, in order)
    and no `rest`, the agents past the first are visited in hops, FIRST_VISITS in the first and
    twice as many each hop after, up to `batch`, one hop at a time while the first agent left is
    not settled. The time range [`since`, `until`) bounds the hits too: an agent with no message
    since `since` is passed over at once.

    Exact: an agent passed over holds no message newer than its Newest bound, which is below the
    k-th newest timestamp in hand, so none of its hits would rank among the first k (a hit as new
    as the k-th could, by messageId: the bound must be beaten, not met). Raises MetaChanged for an
    agent whose metadata moved, visited or not (check_version).
    """
    for scope in scopes:
        check_version(versions, scope.agent_id, known[scope.agent_id].meta_version)
    bounds: dict[str, int | None] = {}  # the newest timestamp a hit of the agent may have
    for scope in scopes:
        bound = known[scope.agent_id].ts_max
        if bound is not None and until is not None:
            bound = min(bound, until - 1)
        # an agent without a clean message (in the range) has no hit: passed over at once
        bounds[scope.agent_id] = None if bound is None or (since is not None and bound < since) else bound
    floor = -(1 << 63)
    ordered = sorted(scopes, key=lambda s: -(bounds[s.agent_id] or floor))
    newest_k: list[int] = []  # min-heap of the k newest timestamps in hand

    def settled(scope: Scope) -> bool:
        bound = bounds[scope.agent_id]
        return bound is None or (len(newest_k) >= k and newest_k[0] > bound)

    def take(answer: A) -> A:
        for ts in times(answer):
            if len(newest_k) < k:
                heapq.heappush(newest_k, ts)
            elif ts > newest_k[0]:
                heapq.heapreplace(newest_k, ts)
        return answer

    def pass_over(scope: Scope) -> A:
        return passed(scope, scope.wids.intersection(known[scope.agent_id].dirty))

    async def visit(scope: Scope) -> A:
        if settled(scope):
            return pass_over(scope)
        return take(await each(scope))

    async def in_hops(scopes: list[Scope]) -> list[A]:
        # the agents of a hop were not settled when it began: a hop reads them all, so it costs
        # one thread hop rather than one per agent (the agents written in the last seconds are
        # the newest and, under 10 writes a second, 14-37 of them were visited one by one)
        found: list[A | None] = [None] * len(scopes)
        at, size = 0, min(FIRST_VISITS, batch)
        while True:
            while at < len(scopes) and bounds[scopes[at].agent_id] is None:  # matchless: out of the order
                at += 1
            if at >= len(scopes) or settled(scopes[at]):  # and every agent after it
                break
            index = [i for i in range(at, min(len(scopes), at + size)) if not settled(scopes[i])]
            assert hop is not None
            for i, answer in zip(index, await hop([scopes[i] for i in index]), strict=True):
                found[i] = take(answer)
            at, size = at + size, min(batch, 2 * size)
        return [answer if answer is not None else pass_over(scope) for scope, answer in zip(scopes, found, strict=True)]

    alone, others = (ordered[:VISITS_ALONE], ordered[VISITS_ALONE:]) if split else (ordered, [])
    answers = await bounded(visit, alone, fanout)
    if matchless is not None and others and not settled(others[0]):
        for agent_id in await matchless(others):
            bounds[agent_id] = None
    if rest is not None and others and not settled(others[0]):
        found = iter(await rest([s for s in others if bounds[s.agent_id] is not None]))
        return answers + [passed(s, s.wids.intersection(known[s.agent_id].dirty))
                          if bounds[s.agent_id] is None or (answer := next(found)) is None else answer
                          for s in others]
    if hop is not None and others:
        return answers + await in_hops(others)
    return answers + await bounded(visit, others, fanout)
