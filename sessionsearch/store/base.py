"""The store's seam: the interface every backend implements (`AgentStore`), and what it returns.

Engine, search/, indexer/ and the importer call only these methods; SQLite (store/sqlite/) is one
implementation, chosen in store/__init__.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..indexer.events import Event


# the columns every backend stores a session's metadata and a transcript row in
SESSION_COLUMNS = {  # wire name -> column
    "label": "label", "displayName": "display_name", "spawnedBy": "spawned_by",
    "parentSessionKey": "parent_session_key", "kind": "kind", "group": "grp",
    "incognito": "incognito", "archivedAt": "archived_at", "updatedAt": "updated_at",
}
EVENT_COLUMNS = "id, wid, event_id, parent_seq, node_seq, type, role, ts, on_branch, text, body"


def session_columns(fields: dict[str, Any], now: int) -> dict[str, Any]:
    """A session upsert's wire fields as column values: known fields in their columns, the rest
    (but the session id) as JSON in `extra`, `updated_at` now unless given."""
    cols = {SESSION_COLUMNS[k]: (int(bool(v)) if k == "incognito" else v)
            for k, v in fields.items() if k in SESSION_COLUMNS}
    extra = {k: v for k, v in fields.items() if k not in SESSION_COLUMNS and k != "sessionId"}
    if extra:
        cols["extra"] = json.dumps(extra, ensure_ascii=False)
    cols.setdefault("updated_at", now)
    return cols


@dataclass(frozen=True, slots=True)
class Match:
    """What a query matches, in no backend's syntax: every word (as the user typed it), the last
    one also as a prefix when `prefix`. Each store turns it into its own query (SQLite: quoted FTS5
    strings), so no user text ever reaches a query language; a word's CJK runs match as substrings
    and the rest as words (store/cjk.py, the scheme every backend indexes by)."""

    words: tuple[str, ...]
    prefix: bool = False


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


class Reader(Protocol):
    """A read connection borrowed with `AgentStore.reader()`: opaque above the seam, handed back to
    the store's read methods; every read through it stops at the block's deadline."""


@runtime_checkable
class AgentStore(Protocol):
    """The transcripts, index and index state of one agent: what Engine, search/, indexer/ and the
    importer call. Windows are ids (`wid`); a window's rows are numbered by `seq` from 1; a row id
    packs both with the role (rowids.py), and index rows and hits carry it. Times are epoch ms
    unless a name says `_s` (seconds); deadlines are `time.monotonic()` seconds."""

    agent_id: str
    # True where a write waits on a database server through the event loop (an import's parse then
    # gives the loop turns, so the server works beside it); False where writes run on a thread of
    # this process, whose Python would only contend with the parse for the GIL
    writes_await_server: bool

    async def close(self) -> None:
        """Release the store's connections and threads; it answers nothing after."""

    def reader(self, deadline: float = math.inf) -> AbstractAsyncContextManager[Reader]:
        """Borrow a reader for a block; waiting for one and its reads raise SearchTimeout past `deadline`."""

    # -- writes: each one transaction ---------------------------------------------------------

    async def upsert_session(self, key: str, fields: dict[str, Any]) -> bool:
        """Create or update a session's metadata (wire field names); True when the session is new."""

    async def append(self, key: str, events: list[Event], *, session_id: str | None = None,
                     index: bool = True, source_lines: int | None = None) -> AppendResult:
        """Store validated events all-or-nothing; a linear batch is indexed in the same transaction."""

    async def rotate(self, key: str, session_id: str | None) -> tuple[str, str | None]:
        """Start a new window for the key (id given or made up); returns (new id, previous id)."""

    async def delete_session(self, key: str) -> bool:
        """Remove a session with its windows, rows and index rows; False when there was none."""

    async def archive(self, key: str) -> int:
        """Move a session's windows out of the store and the index (cold); returns windows moved."""

    async def restore(self, key: str) -> list[int]:
        """Bring a session's cold windows back, needing reconciliation; returns their ids."""

    async def all_source_lines(self) -> dict[str, int]:
        """Lines of each window's import file consumed so far, by session id."""

    async def import_many(self, items: list[tuple]) -> list:
        """Import steps (key, fields, events, session_id, lines) unindexed, one AppendResult or
        exception per step; together in one transaction when none fails."""

    async def dirty_windows(self) -> list[int]:
        """Ids of the windows needing reconciliation, ascending."""

    async def optimize(self, *, min_docs: int | None = ..., min_share: float = ..., max_words: int = ...,
                       incremental: bool = ...) -> dict[str, Any]:
        """Rebuild whatever speeds up searches for common words (words in at least `min_docs`
        messages, None: the backend's own floor, and `min_share` of them, `max_words` at most;
        `incremental`: only what is missing or about to be given up); {"words": {...},
        "dropped": [...], "kept": n}."""

    async def postings_due(self, *, min_docs: int | None, grow_share: float) -> str | None:
        """Why `optimize` would pay off now (no reconciliation backlog, and a first build, the
        index grown by `grow_share`, or words about to go back to the slow path), or None."""

    # -- reconciliation (indexer/reconcile.py drives these) --------------------------------------

    async def claim_and_reconcile_small(self, wid: int, token: str, lease_s: float,
                                        max_rows: int) -> tuple[str, ClaimInfo | None, int, int, list[int]]:
        """Claim the window for `lease_s` s; a window of at most `max_rows` rows is rebuilt and
        published at once, with small windows waiting beside it. Returns (outcome: "claimed" (held
        for batches), "published", "clean", "cold", "busy" or "missing"; the claim; rows deleted;
        rows inserted; windows published beside)."""

    async def reconcile_batch(self, wid: int, token: str, first_seq: int, last_seq: int,
                              lease_s: float) -> tuple[int, int] | None:
        """Bring the index rows of seqs first..last in line with the active branch while the claim
        is ours, renewing its lease; (rows deleted, rows inserted), or None when the claim is lost."""

    async def publish(self, wid: int, token: str, rebuild_gen: int) -> str:
        """Mark the window indexed if the claim is ours and its generation unchanged:
        "published", "changed" (a non-linear write came meanwhile) or "lost"."""

    async def release(self, wid: int, token: str) -> None:
        """Drop the claim if it is still ours."""

    async def window_gen(self, wid: int) -> tuple[int, int, bool] | None:
        """(rebuild generation, last seq, needs rebuild) of a window; None when it is gone."""

    async def reconcile_next(self, after: int, max_rows: int) -> tuple[list[int], int, int, bool]:
        """Rebuild and publish small unclaimed windows waiting next to window `after`, up to
        `max_rows` rows: (windows, rows deleted, rows inserted, whether the write lock was contended)."""

    def rebuilding_beside(self, wid: int) -> bool:
        """Whether this process is rebuilding the window beside another one right now."""

    async def is_clean(self, wid: int) -> bool:
        """Whether the window is indexed and unclaimed as last committed (read without the writer)."""

    async def sweep_orphans(self) -> int:
        """Delete index rows whose window is gone or cold or whose row left the branch; returns how many."""

    # -- reads: through a borrowed reader --------------------------------------------------------

    async def ping(self, reader: Reader) -> None:
        """Read one catalog row; raises when the database does not answer."""

    async def meta_version(self, reader: Reader) -> int:
        """The agent's meta version, which every metadata change moves."""

    async def meta_snapshot(self, reader: Reader, since: int | None = None) -> tuple[
            int, bool, list[SessionMeta], list[WindowMeta], list[str], list[int]]:
        """(meta version, whole, sessions, windows, deleted keys, deleted wids): everything, or only
        what changed after meta version `since` (whole False) while the store still knows."""

    async def search_top(self, reader: Reader, match: Match, *, k: int, order: str,
                         include: list[int] | None, exclude: list[int] | None,
                         role: str | None, hot: str | None = None, since: int | None = None,
                         until: int | None = None, ties: bool = True) -> tuple[int, frozenset[int], list[tuple]] | None:
        """(meta version, windows needing reconciliation, hits): at least the top `k` of `match`
        over the clean windows in scope with a timestamp in [`since`, `until`) (epoch ms), by
        `order` ("relevance" or "recent"), hits as (row id, bm25 lower-is-better over the whole
        agent, message id, ts, text); a row id 0 says more matched. `ties` False: None where settling
        ties at the cut would take ranking every match (search_sessions then ranks them its own way)."""

    async def search_sessions(self, reader: Reader, match: Match, *, k: int,
                              order: str, include: list[int] | None, exclude: list[int] | None, role: str | None,
                              since: int | None = None, until: int | None = None, hot: str | None = None
                              ) -> tuple[int, frozenset[int], list]:
        """(meta version, windows needing reconciliation, sessions) in one snapshot, for resultMode
        "sessions": the best `k` sessions over the clean windows in scope, each (session key, rows
        matched in scope, best hit as search_top's), ordered by best hit (`order`, then newer, then
        message id), then key.
        `hot`: as search_top's, for the top hits the sessions may be read off."""

    async def window_of(self, reader: Reader, key: str, session_id: str | None) -> tuple | None:
        """(wid, session_id, cold) of the key's current window, or of `session_id` if it is the key's."""

    async def windows_of(self, reader: Reader, key: str) -> list[tuple]:
        """(wid, session_id, cold) of every window of a key, current first, then newest first."""

    async def branch_rows(self, reader: Reader, wid: int) -> list[tuple]:
        """The active branch's structural rows in order: (seq, event_id, type, role, first_kept_id)."""

    async def message_rows(self, reader: Reader, wid: int, seqs: list[int]) -> list[tuple]:
        """(seq, event_id, role, ts, body JSON) of the given seqs, in seq order."""

    async def activity(self, reader: Reader) -> tuple[int, dict[str, int]]:
        """The meta version, and each session's latest activity (ms) by key, read now."""

    async def status(self, reader: Reader) -> dict[str, int]:
        """Counts: windows, indexedWindows, backlog, messages, indexedMessages, coldWindows."""


@runtime_checkable
class Backend(Protocol):
    """Where a process's agent stores live: it lists the agents and opens their stores. Chosen once,
    from the settings, by `backend_for` (store/__init__.py)."""

    async def open(self) -> None:
        """Make ready what every store needs (SQLite: the agents folder)."""

    async def close(self) -> None:
        """Release what `open` took; the stores opened from it are closed by their owner."""

    def agent_ids(self) -> list[str]:
        """Ids of the agents that have a store, sorted."""

    def listing_version(self, *, fresh: bool = False) -> int:
        """A token that changes when an agent's store appears or goes (cheap: read per search).
        It may lag another process's change by a moment unless `fresh` (PostgreSQL: backend.py)."""

    async def open_store(self, agent_id: str, *, create: bool = False) -> AgentStore:
        """Open an agent's store, creating it when `create`; raises NotFound when it has none."""

    async def check_ready(self) -> None:
        """Raise Unavailable unless writes can be stored now (each agent's store answers `ping`)."""

    def describe(self) -> str:
        """Where the stores live, as logs and the CLI show it (a database URL without its password)."""

    async def schema_version(self) -> dict[str, Any]:
        """{"store", "database", "version" (applied), "latest" (known to this code)}, read without migrating."""

    async def migrate(self) -> list[dict[str, Any]]:
        """Apply the pending numbered migrations (once, under a lock, however many processes try);
        per database migrated {"database", "from", "to"} (schema versions)."""

    def agent_status(self) -> Iterable[tuple[str, dict[str, int]]]:
        """Per agent: windows, pending, messages, indexed_messages, postings_usable, postings_stale,
        index_log_rows; read without an event loop (metrics scrapes), an unreadable agent left out."""
