"""How many agent stores may hold open files and threads at once (OpenBudget), within what the
process's open-file limit leaves room for (limits.py)."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Protocol


class Releasable(Protocol):
    """A store the budget admits (store.py's SqliteAgentStore)."""

    @property
    def busy(self) -> bool:
        """A reader borrowed or a write running: never released now."""

    async def release(self) -> None:
        """Close the connections and threads (the store reopens them on its next use)."""


_LIVE: weakref.WeakSet[OpenBudget] = weakref.WeakSet()  # this process's budgets, one a SQLite backend


class OpenBudget:
    """At most `most` agent stores hold open files and threads at once: a store about to use its
    connections is admitted, and the least recently admitted idle ones past the bound release
    theirs (Releasable.release). A store in use (a reader borrowed, a write running) is never
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
        self._open: OrderedDict[int, Releasable] = OrderedDict()

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

    async def admit(self, store: Releasable) -> None:
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

    def forget(self, store: Releasable) -> None:
        self._open.pop(id(store), None)

    async def shed(self, keep: Releasable | None = None) -> int:
        """Release every idle store but `keep` (an open just failed for want of files); returns
        how many were released."""
        released = 0
        for key, other in list(self._open.items()):
            if other is not keep and not other.busy and self._open.pop(key, None) is not None:
                await other.release()
                released += 1
        return released
