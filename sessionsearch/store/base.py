"""What every store backend returns; the seam PostgreSQL will implement beside SQLite."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class AppendResult:
    appended: int
    indexed: int
    needs_reconcile: bool
    session_id: str
    duplicates: int = 0
    unknown_parents: list[int] = field(default_factory=list)


@dataclass(slots=True)
class ClaimInfo:
    needs_rebuild: bool
    rebuild_gen: int
    last_seq: int
    cold: bool


@dataclass(slots=True)
class SessionMeta:
    session_key: str
    session_id: str | None
    label: str | None
    display_name: str | None
    spawned_by: str | None
    parent_session_key: str | None
    kind: str | None
    group: str | None
    incognito: int
    archived_at: int | None
    updated_at: int


@dataclass(slots=True)
class WindowMeta:
    wid: int
    session_key: str
    session_id: str
    cold: int
