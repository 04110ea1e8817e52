"""What one request may cost, settled before any work starts and the same on every store.

Every query within its 4,096 units is answered, whatever its number of words: a search's cost is
bounded by the work it does, never by refusing words. A query's words are merged (a repeated word
is one condition of the AND, counted once); the stores then let the rarest words find the rows and
the others only filter them (FTS5's AND steps each phrase's doclist to the next row the others
hold; PostgreSQL's GIN index intersects the words' entries, and a query of many words is scored
from a statement of fixed size: store/postgres/wide.py), so a pasted paragraph costs about what its
matches cost (bench/results/long-query.json).

Who asks bounds what they may hold at once: a scoped token (one agent's credential) has at most
`credential_max_concurrent` agent-tool and MCP requests running; one more waits up to
`credential_queue_wait_ms` for a turn and is then refused. All scoped tokens together have one
fewer turns than the connections a search reads on (the PostgreSQL pool; SQLite's readers per
agent), so their requests can never hold every connection the operator's searches need. The
operator (the gateway) is not held back: it is the one being protected.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ..errors import Busy
from ..settings import Settings
from ..text.unicode61 import tokens

if TYPE_CHECKING:
    from ..identity import Requester


def merged_words(words: Iterable[str], *, prefix: bool) -> list[str]:
    """`words` with each repeated one kept once, in first-seen order. Two words are the same when they
    fold to the same tokens (`Café` and `CAFE`). With `prefix` the last word stays last (it alone may
    match as a prefix), and an earlier copy of it is kept too: the exact word and the prefix differ."""
    given = list(words)
    last = given.pop() if prefix and given else None
    seen: dict[tuple[str, ...], str] = {}
    for word in given:
        seen.setdefault(tuple(tokens(word)), word)
    out = list(seen.values())
    if last is not None:
        out.append(last)
    return out


def word_key(word: str) -> tuple[str, ...]:
    """What makes two query words the same condition: their folded tokens."""
    return tuple(tokens(word))


class CredentialGate:
    """Per scoped token, how many of its requests may run at once, and how many of all scoped tokens'
    requests together (`shared`: one fewer than the connections a search can use, so the operator always
    finds one); `admit` holds a turn of each."""

    def __init__(self, *, max_concurrent: int, wait_s: float, shared: int) -> None:
        self.max_concurrent = max_concurrent
        self.wait_s = wait_s
        self.shared = shared
        self._all = asyncio.Semaphore(shared)
        self._turns: dict[Requester, asyncio.Semaphore] = {}
        self._holders: dict[Requester, int] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> CredentialGate:
        connections = settings.database_pool_max_connections if settings.database_url else settings.readers_per_agent
        shared = max(1, connections - 1)
        return cls(max_concurrent=min(settings.credential_max_concurrent, shared),
                   wait_s=settings.credential_queue_wait_ms / 1000, shared=shared)

    @asynccontextmanager
    async def admit(self, requester: Requester | None) -> AsyncIterator[None]:
        """Run the body as one of `requester`'s turns (None: the operator, never held back); raise Busy
        when no turn came within the wait."""
        if requester is None:
            yield
            return
        turns = self._turns.get(requester)
        if turns is None:
            turns = self._turns[requester] = asyncio.Semaphore(self.max_concurrent)
        self._holders[requester] = self._holders.get(requester, 0) + 1
        loop = asyncio.get_running_loop()
        until = loop.time() + self.wait_s
        try:
            try:
                await asyncio.wait_for(turns.acquire(), timeout=self.wait_s)
            except TimeoutError:
                raise Busy(f"this token already has {self.max_concurrent} requests running and none finished "
                           f"within {round(self.wait_s * 1000)} ms (settings credential_max_concurrent, "
                           "credential_queue_wait_ms); retry when one has answered") from None
            try:
                try:
                    await asyncio.wait_for(self._all.acquire(), timeout=max(0.0, until - loop.time()))
                except TimeoutError:
                    raise Busy(f"scoped tokens already have {self.shared} requests running, as many as may run "
                               "beside the operator's, and none finished within "
                               f"{round(self.wait_s * 1000)} ms (setting credential_queue_wait_ms); retry when one "
                               "has answered") from None
                try:
                    yield
                finally:
                    self._all.release()
            finally:
                turns.release()
        finally:
            self._holders[requester] -= 1
            if not self._holders[requester]:  # no one waits: forget it, so the map holds only active tokens
                del self._holders[requester]
                self._turns.pop(requester, None)
