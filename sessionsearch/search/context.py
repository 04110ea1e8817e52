"""What a search runs with: the settings, the catalog, the backend (its seam: store.base) and the
process it runs in (Host), gathered once per search instead of passed as callbacks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..settings import Settings
from ..store.base import AgentStore, ManySearch
from .catalog import CatalogCache
from .vectors import Meaning

if TYPE_CHECKING:
    from ..embed import Embedder


class Host(Protocol):
    """What a search asks of the process it runs in (the Engine is one)."""

    async def store(self, agent_id: str, *, create: bool = False) -> AgentStore[Any]:
        """The agent's store, opened on first use; raises NotFound for an agent without one."""

    async def embedder(self) -> Embedder | None:
        """The embedder, loaded on first use (None: disabled)."""

    async def enqueue_reconcile(self, dirty: dict[str, set[int]]) -> bool:
        """Ask for these windows to be reconciled; False when the queue was not reached."""

    async def enqueue_embed(self, pending: dict[str, set[int]]) -> bool:
        """Ask for these windows' rows to be embedded; False when the queue was not reached."""

    def observe_search(self, seconds: float, indexing: bool) -> None:
        """Told each answer's latency and whether it said `indexing`."""


@dataclass(frozen=True, slots=True)
class SearchContext:
    settings: Settings  # the search's own (its time budget may be a scoped token's, narrower)
    catalog: CatalogCache
    backend: ManySearch
    host: Host
    meaning: Meaning

    @property
    def fanout(self) -> int:
        """Agents' statements (or batches of them) a search sends at once."""
        return self.settings.search_agents_concurrency

    async def stores(self, agent_ids: Sequence[str]) -> list[AgentStore[Any]]:
        return [await self.host.store(agent_id) for agent_id in agent_ids]
