"""The store's seam: what every backend implements, by role, and what it declares it can do.

An agent's store is read and written through four roles (typing.Protocol, checked by mypy and by
tests/store/test_roles.py): SessionWrites (the doors' writes), TranscriptReads (history),
SearchReads (the catalog, search and meaning reads) and Maintenance (reconciliation, postings,
bounds, sweeps); AgentStore is all four. A Backend lists and opens the stores, searches many of
them at once, and declares what it can do in `features` (as Django's DatabaseFeatures), which the
search plan (search/plan.py) reads instead of probing for methods. The data the seam takes and
returns is in records.py.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar, runtime_checkable

from .records import (  # the seam's data, re-exported: importers name store.base alone
    EVENT_COLUMNS,
    MORE,
    SESSION_COLUMNS,
    AppendResult,
    BesideBatch,
    BranchRow,
    ClaimInfo,
    EmbedClaim,
    Embedded,
    EmbeddingChanges,
    Match,
    MeaningHead,
    MessageRow,
    MetaSnapshot,
    Newest,
    PendingRow,
    ReconcileOutcome,
    RowChanges,
    RowHit,
    ScoreBound,
    SessionMeta,
    SessionTop,
    SessionTops,
    SmallReconcile,
    TopHits,
    Waiting,
    WindowGen,
    WindowMeta,
    WindowRef,
    WindowState,
    session_columns,
)
from .roster import Position, RosterQuery

if TYPE_CHECKING:
    from ..transcript.events import Event
    from .packed import Packed

__all__ = [
    "AppendResult", "BesideBatch", "BranchRow", "ClaimInfo", "EVENT_COLUMNS", "EmbedClaim", "Embedded",
    "EmbeddingChanges", "MORE", "Match", "MeaningHead", "MessageRow", "MetaSnapshot", "Newest",
    "PendingRow", "ReconcileOutcome", "RowChanges", "RowHit", "SESSION_COLUMNS", "ScoreBound",
    "SessionMeta", "SessionTop", "SessionTops", "SmallReconcile", "TopHits", "Waiting", "WindowGen",
    "WindowMeta", "WindowRef", "WindowState", "session_columns", "EmbedTx", "ReconcileTx",
    "SessionWrites", "TranscriptReads", "SearchReads", "Maintenance", "AgentStore", "Features",
    "QueryFeatures", "ManySearch", "Backend", "AgentRole", "R", "T", "Position", "RosterQuery",
]


class EmbedTx(Protocol):
    """The meaning index's primitives inside one write transaction (indexer/embedding.py decides)."""

    async def embed_model(self, model: str, dimensions: int) -> int:
        """The model's number; when it is not the current model it becomes it, and every warm window
        with indexed rows waits for embeddings again (the old ones are stale, SPEC §3)."""

    async def embed_claim(self, wid: int, token: str, lease_s: float) -> EmbedClaim:
        """Take the window's embed claim unless another holder's lease is live."""

    async def embed_waiting(self, wid: int, *, limit: int) -> list[int]:
        """Up to `limit` other warm windows waiting for embeddings whose embed claim is free, nearest
        after `wid` first (others' locked rows skipped)."""

    async def embed_pending(self, wid: int, model_no: int, *, after: int, limit: int) -> list[PendingRow]:
        """Up to `limit` of the window's word-index rows past row id `after` lacking an embedding of
        `model_no`, in row id order."""

    async def store_embeddings(self, wid: int, token: str, lease_s: float, model_no: int,
                               rows: list[Embedded]) -> bool:
        """Store the rows still in the word index while the claim is ours (renewing its lease);
        False when it is not."""

    async def finish_embed(self, wid: int, token: str, model_no: int) -> bool:
        """Mark the window embedded and drop the claim if no row waits; False (claim kept) when some do."""

    async def drop_embed_claim(self, wid: int, token: str) -> None:
        """Drop the embed claim if it is ours."""


class ReconcileTx(EmbedTx, Protocol):
    """The primitives of reconciliation inside one write transaction of one agent's store; the
    algorithm over them is indexer/reconcile.py's. Claims compare against the store's clock (the
    database server's where there is one), read once per transaction."""

    async def window_state(self, wid: int) -> WindowState | None:
        """The window's state (locked for this transaction where rows can be), None when it is gone."""

    async def take_claim(self, wid: int, token: str, lease_s: float) -> ClaimInfo | None:
        """Claim the window for `lease_s` s unless another holder's lease is live (then None)."""

    async def renew_claim(self, wid: int, token: str, lease_s: float) -> bool:
        """Extend our claim's lease; False when the claim is no longer ours."""

    async def drop_claim(self, wid: int, token: str) -> None:
        """Drop the claim if it is ours."""

    async def waiting(self, wid: int, *, after: bool, max_rows: int, limit: int) -> list[Waiting]:
        """Up to `limit` unclaimed warm windows needing reconciliation of at most `max_rows` rows,
        nearest first after `wid` (else before it), taken for this transaction (others' skipped)."""

    def rebuilding(self, wids: frozenset[int]) -> None:
        """Tell this process's jobs these windows are being rebuilt (cleared when the transaction ends)."""

    async def rebuild_whole(self, wids: list[int]) -> RowChanges:
        """Index whole windows from their active branch and mark them indexed."""

    async def diff(self, wid: int, first_seq: int, last_seq: int) -> RowChanges:
        """Make the index rows of seqs first..last match the active branch."""

    async def mark_published(self, wid: int, token: str, rebuild_gen: int) -> bool:
        """Mark the window indexed and unclaimed if the claim is ours and its generation `rebuild_gen`."""

    async def holds_claim(self, wid: int, token: str) -> bool:
        """Whether the claim is ours."""

    async def window_gen(self, wid: int) -> WindowGen | None:
        """The window's generation, last seq and need; None when it is gone."""

    async def index_changed(self) -> None:
        """Windows were published: let searches that cached which windows need work read them again."""

    def contended(self) -> bool:
        """Whether this transaction waited for another process's write lock."""


T = TypeVar("T")
# each backend's reader: opaque above the seam, handed back to the store's read methods
R = TypeVar("R")


class AgentRole(Protocol):
    """What every role of an agent's store has: its agent. Windows are ids
    (`wid`); a window's rows are numbered by `seq` from 1; a row id packs both with the role
    (rowids.py), and index rows and hits carry it. Times are epoch ms unless a name says `_s`
    (seconds); deadlines are `time.monotonic()` seconds."""

    agent_id: str


@runtime_checkable
class SessionWrites(AgentRole, Protocol):
    """The writes the doors and the importer make, each one transaction."""

    # True where a write waits on a database server through the event loop (an import's parse then
    # gives the loop turns, so the server works beside it); False where writes run on a thread of
    # this process, whose Python would only contend with the parse for the GIL
    writes_await_server: bool

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

    async def import_many(self, items: list[tuple[Any, ...]]) -> list[Any]:
        """Import steps (key, fields, events, session_id, lines) unindexed, one AppendResult or
        exception per step; together in one transaction when none fails."""


@runtime_checkable
class TranscriptReads(AgentRole, Protocol[R]):
    """A session's windows and its active branch, through a borrowed reader (search/history.py). `R`
    is the backend's reader, borrowed with `reader()`; every read through it stops at the block's
    deadline."""

    def reader(self, deadline: float = math.inf) -> AbstractAsyncContextManager[R]:
        """Borrow a reader for a block; waiting for one and its reads raise SearchTimeout past `deadline`."""

    async def window_of(self, reader: R, key: str, session_id: str | None) -> WindowRef | None:
        """The key's current window, or `session_id`'s if it is the key's."""

    async def windows_of(self, reader: R, key: str) -> list[WindowRef]:
        """Every window of a key, current first, then newest first."""

    async def branch_rows(self, reader: R, wid: int) -> list[BranchRow]:
        """The active branch's structural rows in order."""

    async def message_rows(self, reader: R, wid: int, seqs: list[int]) -> list[MessageRow]:
        """The given seqs' rows, in seq order."""


@runtime_checkable
class SearchReads(AgentRole, Protocol[R]):
    """The catalog, the word index and the meaning index, through a borrowed reader (search/). `R`
    is the backend's reader, borrowed with `reader()`; every read through it stops at the block's
    deadline."""

    def reader(self, deadline: float = math.inf) -> AbstractAsyncContextManager[R]:
        """Borrow a reader for a block; waiting for one and its reads raise SearchTimeout past `deadline`."""

    async def ping(self, reader: R) -> None:
        """Read one catalog row; raises when the database does not answer."""

    async def meta_version(self, reader: R) -> int:
        """The agent's meta version, which every metadata change moves."""

    async def meta_snapshot(self, reader: R, since: int | None = None) -> MetaSnapshot:
        """Everything, or only what changed after meta version `since` (whole False) while the
        store still knows."""

    async def activity(self, reader: R) -> tuple[int, dict[str, int]]:
        """The meta version, and each session's latest activity (ms) by key, read now."""

    async def search_top(self, reader: R, match: Match, *, k: int, order: str,
                         include: list[int] | None, exclude: list[int] | None,
                         role: str | None, hot: str | None = None, since: int | None = None,
                         until: int | None = None, ties: bool = True) -> TopHits | None:
        """At least the top `k` of `match` over the clean windows in scope with a timestamp in
        [`since`, `until`) (epoch ms), by `order` ("relevance" or "recent"); a hit `MORE` (row id
        0) says more matched. `ties` False: None where settling ties at the cut would take ranking
        every match (search_sessions then ranks them its own way)."""

    async def search_sessions(self, reader: R, match: Match, *, k: int,
                              order: str, include: list[int] | None, exclude: list[int] | None, role: str | None,
                              since: int | None = None, until: int | None = None, hot: str | None = None
                              ) -> SessionTops:
        """In one snapshot, for resultMode "sessions": the best `k` sessions over the clean windows
        in scope, ordered by best hit (`order`, then newer, then message id), then key.
        `hot`: as search_top's, for the top hits the sessions may be read off."""

    async def meaning_head(self, reader: R, model: str) -> MeaningHead:
        """The model numbers, change counters, and windows needing reconciliation or embeddings."""

    async def embedding_changes(self, reader: R, model_no: int, embed_seq: int, gone_seq: int
                                ) -> EmbeddingChanges:
        """Embeddings of `model_no` stored after `embed_seq`, rows re-stored under another model, and
        embeddings deleted after `gone_seq` (0, 0: every one)."""

    async def load_embeddings(self, reader: R, model_no: int, dims: int) -> tuple[Packed, EmbeddingChanges]:
        """Every embedding of `model_no` in one snapshot, for a process holding none: those folded
        into blocks (store/packed.py; none when the fold is of another model) and the changes after
        the fold's counters."""

    async def fold_vectors(self) -> dict[str, Any] | None:
        """Fold the embeddings into blocks again when enough were stored since the last fold
        (store/packed.py): what was folded, or None when no fold was due or another came first."""

    async def indexed_rows(self, reader: R, rids: list[int]) -> list[RowHit]:
        """Those of `rids` that are word-index rows now, with their text (score 0), in no order."""

    async def status(self, reader: R) -> dict[str, int]:
        """Counts: windows, indexedWindows, backlog, messages, indexedMessages, coldWindows."""

    async def embed_status(self, reader: R, model: str) -> dict[str, int]:
        """embeddedMessages (word-index rows with an embedding of `model`) and embeddingBacklog
        (those without), of embeddable windows only: an incognito session's rows are neither."""


@runtime_checkable
class Maintenance(AgentRole, Protocol):
    """Reconciliation (indexer/reconcile.py holds the algorithm), postings, bounds and sweeps, as the
    workers and the CLI run them; and closing the store."""

    async def close(self) -> None:
        """Release the store's connections and threads; it answers nothing after."""

    async def dirty_windows(self) -> list[int]:
        """Ids of the windows needing reconciliation, ascending."""

    async def optimize(self, *, min_docs: int | None = ..., min_share: float = ..., max_words: int = ...,
                       incremental: bool = ...) -> dict[str, Any]:
        """Rebuild whatever speeds up searches for common words (words in at least `min_docs`
        messages, None: the backend's own floor, and `min_share` of them, `max_words` at most;
        `incremental`: only what is missing or about to be given up); {"words": {...},
        "dropped": [...], "kept": n}."""

    async def fold_bounds(self) -> dict[str, Any] | None:
        """Keep the bounds a search of many agents passes this one over by (store/sqlite/bounds.py)
        as of the index now: {"terms", "seconds"}, {} when the index moved on meanwhile, is too
        large to fold or the bounds are of it already; None where the store keeps none."""

    async def postings_due(self, *, min_docs: int | None, grow_share: float) -> str | None:
        """Why `optimize` would pay off now (no reconciliation backlog, and a first build, the
        index grown by `grow_share`, or words about to go back to the slow path), or None."""

    async def reconcile_tx(self, step: Callable[[ReconcileTx], Awaitable[T]]) -> T:
        """Run `step` over the reconciliation primitives as one write transaction, then clear what
        it marked `rebuilding`. On SQLite the step runs on the writer's thread and must not
        suspend: everything it awaits is a primitive."""

    def rebuilding_beside(self, wid: int) -> bool:
        """Whether this process is rebuilding the window beside another one right now."""

    async def is_clean(self, wid: int) -> bool:
        """Whether the window is indexed and unclaimed as last committed (read without the writer)."""

    async def sweep_orphans(self) -> int:
        """Delete index rows whose window is gone or cold or whose row left the branch; returns how many."""


@runtime_checkable
class AgentStore(SessionWrites, TranscriptReads[R], SearchReads[R], Maintenance, Protocol[R]):
    """The transcripts, index and index state of one agent: every role at once (what the engine
    holds and hands to each part the role it needs)."""


@dataclass(frozen=True, slots=True)
class Features:
    """What a backend can do, declared once (as Django's DatabaseFeatures) and read by the search
    plan (search/plan.py): every method below is always there, these say which path pays off."""

    # search_top_many reads many whole agents in one statement (PostgreSQL); else the agents are
    # searched each by itself
    many_in_one_statement: bool
    # search_top_each runs a batch of agents' statements in one hop (SQLite: one thread); else
    # the search sends each agent's statement by itself, a few at once
    batches_agents: bool
    # kept_bounds answers from memory, without a read (SQLite: bounds folded per file stamp)
    bounds_in_memory: bool


class QueryFeatures(NamedTuple):
    """What a backend can do for one query (Backend.query_features): a statement of many agents
    or score bounds can need what the query has (words with tokens) or lacks (very many words)."""

    many_in_one_statement: bool  # search_top_many answers this query in one statement
    score_bounds: bool  # score_bounds bounds this query's scores


class ManySearch(Protocol):
    """Searching many agents' stores at once: what search/execute.py calls, as `features` and
    `query_features` choose (search/plan.py)."""

    features: Features

    def query_features(self, match: Match) -> QueryFeatures:
        """What this backend can do for `match` (cheap: no read)."""

    async def search_top_each(self, stores: Sequence[AgentStore[Any]], match: Match,
                              scopes: Sequence[tuple[list[int] | None, list[int]]], *, deadline: float, k: int,
                              order: str, role: str | None, hot: str | None, since: int | None,
                              until: int | None) -> list[TopHits]:
        """Each store's search_top with its (include, exclude) scope, in their order (SQLite: their
        statements a batch a thread hop; features.batches_agents says whether that pays)."""

    async def search_top_many(self, stores: Sequence[AgentStore[Any]], match: Match, *, k: int, order: str,
                              exclude: list[int], role: str | None, since: int | None, until: int | None,
                              deadline: float, sparse: bool = False) -> list[TopHits | None]:
        """By `order` over whole agents (less the windows in `exclude`): per store, its meta
        version, dirty windows and those of its hits that are among the top `k` of all the
        stores', as each store's search_top scores them (where query_features says it answers
        in one statement; else each store searched by itself). `sparse` (order "recent", for a
        caller that read every store's Newest): a store with no hit among them may be left
        unread, None in its place."""

    async def score_bounds(self, stores: Sequence[AgentStore[Any]], match: Match,
                           deadline: float) -> list[ScoreBound] | None:
        """Each store's ScoreBound for the query (where query_features says it bounds it; else each
        unknown, inf, with the store's Newest read); None when reading bounds would not pay off
        for these stores now (PostgreSQL: most of them never folded, so the one statement of them
        all is the whole search)."""

    def kept_bounds(self, stores: Sequence[AgentStore[Any]], match: Match) -> list[ScoreBound | None]:
        """Each store's ScoreBound for the query as far as it is kept in memory, without a read
        (None: not kept; every one None where features.bounds_in_memory is False)."""

    async def newest(self, stores: Sequence[AgentStore[Any]], deadline: float) -> list[Newest]:
        """Each store's Newest, in their order, as committed now (cheap for many stores at once:
        PostgreSQL reads them in one statement, SQLite answers unchanged files from memory)."""

    async def roster(self, stores: Sequence[AgentStore[Any]], query: RosterQuery, deadline: float
                     ) -> list[SessionMeta]:
        """The sessions of the stores `query` selects (store/roster.py), read now, newest activity
        first (then key), after `query.after`, at most `query.limit` (PostgreSQL: one statement of
        them all; SQLite: each store's statement, a hop of many stores on one thread)."""

    async def roster_keys(self, stores: Sequence[AgentStore[Any]], query: RosterQuery, deadline: float
                          ) -> list[tuple[list[str], bool]]:
        """Per store, in their order: the keys of the sessions `query` selects (its text rules as SQL
        narrows them), or (True) the keys of those it does not, incognito ones among them, whichever
        are fewer (a scope that selects most of an agent's sessions reads the few it leaves out)."""


@runtime_checkable
class Backend(ManySearch, Protocol):
    """Where a process's agent stores live: it lists the agents, opens their stores and searches
    many of them at once (ManySearch). Chosen once, from the settings, by `backend_for`
    (store/__init__.py)."""

    # every agent's rows in one database, so that `check_ready` answering covers every agent's store
    shared_database: bool

    async def open(self) -> None:
        """Make ready what every store needs (SQLite: the agents folder)."""

    async def close(self) -> None:
        """Release what `open` took; the stores opened from it are closed by their owner."""

    def agent_ids(self) -> list[str]:
        """Ids of the agents that have a store, sorted."""

    def listing_version(self, *, fresh: bool = False) -> int:
        """A token that changes when an agent's store appears or goes (cheap: read per search).
        It may lag another process's change by a moment unless `fresh` (PostgreSQL: backend.py)."""

    async def open_store(self, agent_id: str, *, create: bool = False) -> AgentStore[Any]:
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
