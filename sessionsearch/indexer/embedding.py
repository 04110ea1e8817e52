"""The embed job: give one window's word-index rows an embedding of the current model (SPEC §3).

claim (lease, apart from reconciliation's) -> read a batch of pending rows -> embed them outside any
transaction -> store them while the claim is still ours, reading the next batch in the same
transaction -> when none is left, mark the window embedded and release. An embedding is keyed by
the row id of an immutable transcript row, so storing it is right whenever the row is still in the
word index, however the branch moved meanwhile: "publish if unchanged" is that check, per row, in
the storing transaction. Every decision is made here, once, over the primitives each backend gives
one transaction (store.base.EmbedTx, run by `AgentStore.reconcile_tx`).
"""

from __future__ import annotations

import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import structlog

from ..embed import EmbedderFailed
from ..store import packed
from ..store.base import AgentStore, EmbedClaim, Embedded, EmbedTx, PendingRow
from ..store.rowids import wid_of

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..embed import Embedder

log = structlog.get_logger("sessionsearch.embedding")

# rows one embed call takes: enough that the model's per-call cost is spread thin, few enough that
# the transaction storing them stays short and a lost lease loses little work
EMBED_BATCH_ROWS = 512
COALESCE_WINDOWS = 64  # most windows one batch takes


def quantize(vectors: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """int8 rows and their scales: row i ≈ q[i] * scale[i] (a zero row keeps scale 0)."""
    peak = np.abs(vectors).max(axis=1) if len(vectors) else np.zeros(0, np.float32)
    scale = (peak / 127).astype(np.float32)
    safe = np.where(scale > 0, scale, 1)
    return np.clip(np.rint(vectors / safe[:, None]), -127, 127).astype(np.int8), scale


def checked(vectors: Any, rows: int, dimensions: int) -> npt.NDArray[np.float32]:
    """The embedder's answer as float32 rows, or EmbedderFailed saying what was wrong with it."""
    out = np.asarray(vectors, dtype=np.float32)
    if out.shape != (rows, dimensions):
        raise EmbedderFailed(f"the embedder answered shape {out.shape} for {rows} texts of {dimensions} dimensions")
    if not np.isfinite(out).all():
        raise EmbedderFailed("the embedder answered vectors that are not finite numbers")
    return out


@dataclass(slots=True)
class EmbedResult:
    # "embedded", "clean", "busy", "missing", "lost", "stopped"; or "cold", "incognito": a window no
    # embedder is given, refused by the claim and never counted as waiting (store/*/meaning.py
    # `embeddable`), so a job sent for one anyway changes nothing
    outcome: str
    rows: int = 0
    batches: int = 0
    seconds: float = 0.0


async def _gather(tx: EmbedTx, held: dict[int, int], wids: list[int], token: str, mno: int, limit: int
                  ) -> list[PendingRow]:
    """Up to `limit` pending rows of the windows `wids` held (`held`: wid -> last row id stored),
    in order; a window with none left is marked embedded and let go."""
    rows: list[PendingRow] = []
    for wid in wids:
        if len(rows) >= limit:
            break
        got = await tx.embed_pending(wid, mno, after=held[wid], limit=limit - len(rows))
        if not got:
            if await tx.finish_embed(wid, token, mno):
                del held[wid]
                continue
            # rows came before the last one stored meanwhile (a rewind reconciled back): from the first
            held[wid] = 0
            got = await tx.embed_pending(wid, mno, after=0, limit=limit - len(rows))
        rows += got
    return rows


async def _claim_and_read(tx: EmbedTx, wid: int, token: str, lease_s: float, model: str, dimensions: int,
                          limit: int, held: dict[int, int]) -> tuple[EmbedClaim, int, list[PendingRow]]:
    """Claim the window and read its first batch; while the batch has room, other windows waiting
    next to it are claimed and read into the same batch (each job pays an embed call and two
    commits: windows of a few dozen messages would spend most of it on those)."""
    mno = await tx.embed_model(model, dimensions)
    claim = await tx.embed_claim(wid, token, lease_s)
    if claim != EmbedClaim.CLAIMED:
        return claim, mno, []
    held[wid] = 0
    rows = await _gather(tx, held, [wid], token, mno, limit)
    if len(rows) < limit:
        for other in await tx.embed_waiting(wid, limit=COALESCE_WINDOWS):
            if len(rows) >= limit:
                break
            if await tx.embed_claim(other, token, lease_s) == EmbedClaim.CLAIMED:
                held[other] = 0
                rows += await _gather(tx, held, [other], token, mno, limit - len(rows))
    return claim, mno, rows


async def _store_and_read(tx: EmbedTx, token: str, lease_s: float, mno: int, rows: list[Embedded],
                          held: dict[int, int], limit: int) -> tuple[list[PendingRow], list[int]]:
    """Store the batch per window while each claim is still ours (a window whose claim was taken
    over is let go: its new holder makes them), then read the next batch."""
    by_window: dict[int, list[Embedded]] = {}
    for row in rows:
        by_window.setdefault(wid_of(row.rid), []).append(row)
    lost = []
    for wid, made in by_window.items():
        if wid not in held:
            continue
        if await tx.store_embeddings(wid, token, lease_s, mno, made):
            held[wid] = max(held[wid], made[-1].rid)
        else:
            del held[wid]
            lost.append(wid)
    return await _gather(tx, held, list(held), token, mno, limit), lost


async def embed_window(store: AgentStore[Any], embedder: Embedder, wid: int, *, batch_rows: int = EMBED_BATCH_ROWS,
                       lease_s: float = 60.0, token: str | None = None,
                       should_stop: Callable[[], bool] | None = None,
                       observe: Callable[[str, float, int], None] | None = None) -> EmbedResult:
    """Embed window `wid`'s pending rows (and those of windows waiting next to it) in batches under
    a claim each; raises EmbedderFailed (nothing of that batch stored, the claims released) for
    the queue to retry with backoff. `observe(outcome, seconds, rows)` is told each batch (metrics)."""
    started = time.monotonic()
    batch_rows = min(batch_rows, embedder.batch_rows)
    token = token or uuid.uuid4().hex
    model, dims = embedder.model, embedder.dimensions
    held: dict[int, int] = {}  # windows claimed -> the last row id stored

    async def release() -> None:
        async def drop(tx: EmbedTx) -> None:
            for other in held:
                await tx.drop_embed_claim(other, token)
        if held:
            await store.reconcile_tx(drop)

    claim, mno, rows = await store.reconcile_tx(
        lambda tx: _claim_and_read(tx, wid, token, lease_s, model, dims, batch_rows, held))
    result = EmbedResult({EmbedClaim.CLAIMED: "clean", EmbedClaim.BUSY: "busy", EmbedClaim.MISSING: "missing",
                          EmbedClaim.COLD: "cold", EmbedClaim.INCOGNITO: "incognito"}[claim])
    if claim != EmbedClaim.CLAIMED:
        return _done(store, wid, result, started)
    try:
        while rows:
            if should_stop is not None and should_stop():
                await release()
                result.outcome = "stopped"
                return _done(store, wid, result, started)
            batch_started = time.monotonic()
            try:
                vectors = checked(await embedder.embed([r.text for r in rows]), len(rows), dims)
            except EmbedderFailed as exc:
                if observe is not None:
                    observe("failed", time.monotonic() - batch_started, len(rows))
                log.warning("embed.failed", agent=store.agent_id, wid=wid, rows=len(rows), error=str(exc))
                raise
            q, scale = quantize(vectors)
            made = [Embedded(r.rid, r.ts, float(s), v.tobytes()) for r, s, v in zip(rows, scale, q)]
            rows, lost = await store.reconcile_tx(partial(_store_and_read, token=token, lease_s=lease_s, mno=mno,
                                                          rows=made, held=held, limit=batch_rows))
            if observe is not None:
                observe("lost" if lost else "stored", time.monotonic() - batch_started, len(made))
            result.rows += len(made)
            result.batches += 1
            if wid in lost:
                result.outcome = "lost"
            elif result.outcome != "lost":
                result.outcome = "embedded"
        await release()  # nothing should be left held; a claim left would only wait out its lease
        if result.rows:
            await _fold(store, result.rows)
        return _done(store, wid, result, started)
    except BaseException:
        try:
            await release()
        except Exception:  # the leases expire on their own
            log.warning("embed.release_failed", agent=store.agent_id, wid=wid)
        raise


# rows this process stored per agent store since it last asked whether a fold is due: asking costs
# a count of the rows since the last fold, which each embed job of 512 rows would otherwise pay
_stored_since: weakref.WeakKeyDictionary[AgentStore[Any], int] = weakref.WeakKeyDictionary()


async def _fold(store: AgentStore[Any], rows: int) -> None:
    """Fold the agent's embeddings into blocks when enough were stored since the last fold
    (store/packed.py), so a process starting cold loads them in a few reads; the embeddings stored
    stay whatever becomes of the fold (a failed one is done again by a later job)."""
    stored = _stored_since.get(store, 0) + rows
    if stored < packed.FOLD_MIN_ROWS:
        _stored_since[store] = stored
        return
    _stored_since[store] = 0
    try:
        folded = await store.fold_vectors()
    except Exception as exc:  # a database fault: the rows stay readable one by one meanwhile
        log.warning("embed.fold_failed", agent=store.agent_id, error=f"{type(exc).__name__}: {exc}")
        return
    if folded is not None:
        log.info("embed.folded", agent=store.agent_id, **folded)


def _done(store: AgentStore[Any], wid: int, result: EmbedResult, started: float) -> EmbedResult:
    result.seconds = time.monotonic() - started
    log.info("embed.done", agent=store.agent_id, wid=wid, outcome=result.outcome, rows=result.rows,
             batches=result.batches, seconds=round(result.seconds, 4))
    return result
