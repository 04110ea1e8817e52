"""mypy's half of checking that each backend plays every role of the seam (store/base.py) with its
own reader type; tests/store/test_roles.py is the other half (names, parameters, defaults). Only
mypy reads this: nothing is imported at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import AgentStore, Backend, Maintenance, SearchReads, SessionWrites, TranscriptReads
    from .postgres.backend import PgBackend
    from .postgres.db import Reader
    from .postgres.store import PgAgentStore
    from .sqlite.backend import SqliteBackend
    from .sqlite.search import _Reader
    from .sqlite.store import SqliteAgentStore

    def _sqlite(store: SqliteAgentStore, backend: SqliteBackend) -> tuple[
            SessionWrites, TranscriptReads[_Reader], SearchReads[_Reader], Maintenance, AgentStore[_Reader], Backend]:
        return store, store, store, store, store, backend

    def _postgres(store: PgAgentStore, backend: PgBackend) -> tuple[
            SessionWrites, TranscriptReads[Reader], SearchReads[Reader], Maintenance, AgentStore[Reader], Backend]:
        return store, store, store, store, store, backend
