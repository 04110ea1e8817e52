"""What a search finds: hits, sessions of hits, and one query's outcome over every agent in scope."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Hit:
    agent_id: str
    rid: int
    rank: float  # bm25: lower is better
    message_id: str
    ts: int
    text: str
    matched_by: tuple[str, ...] = ()  # semantic and hybrid modes: how the hit was found
    snippet: str | None = None  # semantic and hybrid modes: the passage nearest the query

    def sort_key(self, order: str) -> tuple[Any, ...]:
        if order == "recent":
            return (-self.ts, self.message_id)
        return (self.rank, -self.ts, self.message_id)


@dataclass
class SessionGroup:
    """A session's hits in scope (resultMode "sessions"): how many, and the best."""

    agent_id: str
    session_key: str
    hits: int
    best: Hit

    def sort_key(self, order: str) -> tuple[Any, ...]:
        return (*self.best.sort_key(order), self.session_key)


@dataclass
class Outcome:
    hits: list[Hit] = field(default_factory=list)
    more: bool = False
    dirty: dict[str, set[int]] = field(default_factory=dict)
    groups: list[SessionGroup] = field(default_factory=list)  # resultMode "sessions"
    pending: dict[str, set[int]] = field(default_factory=dict)  # windows waiting for embeddings
    meaning_failed: bool = False  # the query could not be embedded
