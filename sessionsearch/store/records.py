"""What the store's seam (base.py) takes and returns: session and window metadata, hits, bounds,
reconciliation and embedding states, in no backend's terms. Every backend builds these; search/,
indexer/ and the engine read them."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

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
    and the rest as words (store/cjk.py, the scheme every backend indexes by).

    `any` > 0: a row holding any of the words' phrases matches (OR, hybrid's keyword half:
    search/anyword.py), scored by the same BM25, which sums over the phrases a row holds; of more
    words than `any`, a store ORs the `any` it counts fewest rows of (`cut`). Such a query has no
    score bounds (a bound assumes every phrase is in the row)."""

    words: tuple[str, ...]
    prefix: bool = False
    any: int = 0

    def cut(self, docs: Sequence[float] | None = None) -> Match:
        """An any-word Match cut to at most `any` of its words: those of least `docs` (per word, the
        rows a store counts holding it), the longest among equals and where `docs` is None (long
        words are the rare ones, mostly), in the caller's order; the last word stays a prefix when
        it stays."""
        if not self.any or len(self.words) <= self.any:
            return self
        order = sorted(range(len(self.words)),
                       key=lambda i: (0.0 if docs is None else docs[i], -len(self.words[i])))
        keep = sorted(order[:self.any])
        return Match(tuple(self.words[i] for i in keep), self.prefix and keep[-1] == len(self.words) - 1, self.any)


@dataclass(slots=True)
class AppendResult:
    appended: int
    indexed: int
    needs_reconcile: bool
    session_id: str
    duplicates: int = 0
    unknown_parents: list[int] = field(default_factory=list)


class ReconcileOutcome(StrEnum):
    """How a reconciliation step or job ended (compared and logged as its string)."""

    CLAIMED = "claimed"  # a window too large for one transaction: the claim is held for batches
    PUBLISHED = "published"
    CLEAN = "clean"  # nothing to do: indexed and unclaimed
    BESIDE = "beside"  # being rebuilt beside another window in this process right now
    BUSY = "busy"  # another holder's claim is live
    LOST = "lost"  # the claim was taken over meanwhile
    MISSING = "missing"  # the window is gone
    CHANGED = "changed"  # a non-linear write came meanwhile, round after round
    COLD = "cold"  # archived: nothing is indexed
    STOPPED = "stopped"  # the worker is shutting down


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """A window's state as its claim was taken."""

    needs_rebuild: bool
    rebuild_gen: int
    last_seq: int
    cold: bool


class WindowState(NamedTuple):
    """What deciding to claim a window reads first."""

    needs_rebuild: bool
    claim_free: bool  # unclaimed, or its lease expired


class WindowGen(NamedTuple):
    rebuild_gen: int
    last_seq: int
    needs_rebuild: bool


class RowChanges(NamedTuple):
    """Index rows a rebuild deleted and inserted."""

    deleted: int
    inserted: int


class Waiting(NamedTuple):
    """A window needing reconciliation, as picked to be rebuilt beside another."""

    wid: int
    rows: int  # its last seq


class SmallReconcile(NamedTuple):
    """What claiming a window did: see indexer.reconcile.claim_small."""

    outcome: ReconcileOutcome
    claim: ClaimInfo | None
    deleted: int
    inserted: int
    beside: tuple[int, ...]  # other windows published in the same transaction


class BesideBatch(NamedTuple):
    """What one transaction rebuilding waiting windows did: see indexer.reconcile.reconcile_next."""

    windows: tuple[int, ...]
    deleted: int
    inserted: int
    contended: bool  # its write lock was held by another process first


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


class MetaSnapshot(NamedTuple):
    """The catalog as a store answers it: everything (`whole`), or what changed after a version."""

    version: int
    whole: bool
    sessions: list[SessionMeta]
    windows: list[WindowMeta]
    deleted_keys: list[str]
    deleted_wids: list[int]


class RowHit(NamedTuple):
    """A matching index row; `row_id` 0 is no row but says more matched than were asked for."""

    row_id: int
    score: float  # bm25 over the whole agent, lower is better
    message_id: str
    ts: int
    text: str


MORE = RowHit(0, math.inf, "", 0, "")


class TopHits(NamedTuple):
    meta_version: int
    dirty: frozenset[int]  # windows needing reconciliation (never matched)
    hits: list[RowHit]


class Newest(NamedTuple):
    """What a search of many agents orders them by and passes them over with (search/visits.py):
    the meta version, a bound on the timestamps of every message of the clean hot windows (None:
    no such message, so no hit), and the windows needing reconciliation, read now."""

    meta_version: int
    ts_max: int | None
    dirty: frozenset[int]


class ScoreBound(NamedTuple):
    """What a search of many agents by relevance orders them by and passes them over with
    (search/visits.py, best_first): the meta version, the windows needing reconciliation, and the highest
    score (-bm25) a row of the agent can have for the query, read now (inf: not known, -inf: no
    row matches)."""

    meta_version: int
    dirty: frozenset[int]
    bound: float


class SessionTop(NamedTuple):
    session_key: str
    matched: int  # rows matched in scope
    best: RowHit


class SessionTops(NamedTuple):
    meta_version: int
    dirty: frozenset[int]
    sessions: list[SessionTop]


class WindowRef(NamedTuple):
    wid: int
    session_id: str
    cold: int


class BranchRow(NamedTuple):
    """A structural row of the active branch."""

    seq: int
    event_id: str
    type: str
    role: str | None
    first_kept_id: str | None  # a reset's firstKeptEntryId


class MessageRow(NamedTuple):
    seq: int
    event_id: str
    role: str | None
    ts: int
    body: str  # JSON


class EmbedClaim(StrEnum):
    """What asking for a window's embed claim found."""

    CLAIMED = "claimed"
    BUSY = "busy"  # another embed job's lease is live
    MISSING = "missing"
    COLD = "cold"
    INCOGNITO = "incognito"  # never embedded: its text goes to no embedder, and it never answers

    @classmethod
    def refused(cls, state: tuple[Any, Any] | None) -> EmbedClaim:
        """Why a claim was not taken, from the window's `(cold, incognito)` row (None: no window)."""
        if state is None:
            return cls.MISSING
        if state[1]:
            return cls.INCOGNITO
        return cls.COLD if state[0] else cls.BUSY


class PendingRow(NamedTuple):
    """A word-index row without an embedding of the current model."""

    rid: int
    ts: int
    text: str


class Embedded(NamedTuple):
    """An embedding as stored: int8 components scaled by `scale` (store/sqlite/migrations.py, 15)."""

    rid: int
    ts: int
    scale: float
    vec: bytes


class MeaningHead(NamedTuple):
    """What a semantic search reads first, in one snapshot."""

    meta_version: int
    model_no: int | None  # the number of the searcher's model, None when the store has never seen it
    current_no: int  # the model the workers embed with now (0: none yet)
    embed_seq: int  # moved by every transaction storing embeddings
    gone_seq: int  # moved by every deletion of embeddings
    dirty: frozenset[int]  # windows needing reconciliation
    pending: frozenset[int]  # windows with rows waiting for an embedding


class EmbeddingChanges(NamedTuple):
    """Embeddings of one model stored after `embed_seq`, and deleted after `gone_seq`."""

    rows: list[Embedded]
    other_model: list[int]  # rows stored since under another model (they replace what was there)
    gone: list[int]
    embed_seq: int
    gone_seq: int
