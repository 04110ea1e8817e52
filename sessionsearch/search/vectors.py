"""One agent's embeddings of the current model, in memory, for exact nearest-neighbour search.

Loaded cold from the store's packed blocks and the rows stored or deleted since their fold
(store/packed.py), in a task of its own that a search waits on for LOAD_WAIT_S at most; then
refreshed by the store's change counters (rows stored after the last one held, deletions after the
last one applied), so a search pays for what changed only. Rows live in a part sorted by row id
(binary search) and a tail of recent rows (scanned), merged into the sorted part once the tail
grows; a replaced or deleted row is marked dead in place. Vectors are int8 with a per-row scale, as
stored: 256 dimensions take 256 bytes a row, ~285 MB per million rows with ids, windows, times and
scales; a process holds MAX_BYTES of them at most, the least recently searched agents' let go
first. Scoring is an int8 dot product over every row in scope (simsimd's SIMD kernels), exact up to
the quantization.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import simsimd
import structlog

from ..store.base import AgentStore, EmbeddingChanges
from ..store.packed import Packed
from ..store.rowids import HIGH, LOW_BITS, SEQ_BITS

log = structlog.get_logger("sessionsearch.search")

MIN_TAIL = 50_000  # rows the tail holds before it is merged, at least
# the longest a search waits for an agent's vectors to load in a process holding none (a million
# rows took 0.21 s of the process's CPU to load from packed blocks: bench/bench_vectors.py)
LOAD_WAIT_S = 0.5
MAX_BYTES = 2 << 30  # the vectors a process holds, all agents together (~7M rows of 256 dimensions)


def wids_of(rids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """rowids.wid_of over an array."""
    high = (rids & HIGH) != 0
    return np.where(high, (rids & ~HIGH) >> (SEQ_BITS + 1), rids >> LOW_BITS)


class AgentVectors:
    def __init__(self, model_no: int, dimensions: int) -> None:
        self.model_no = model_no
        self.dims = dimensions
        self.embed_seq = 0
        self.gone_seq = 0
        self.n = 0  # rows used
        self.sorted_upto = 0  # rows [0, sorted_upto) are sorted by row id (unique); past it, a tail
        self.live = 0
        self._alloc(0)

    @classmethod
    def of(cls, held: Packed, dimensions: int) -> AgentVectors:
        """Vectors holding `held`'s rows (sorted, unique: all of them the sorted part), not copied."""
        out = cls(held.model_no, dimensions)
        out.rid, out.ts, out.scale, out.vec = held.rid, held.ts, held.scale, held.vec
        out.wid, out.alive = wids_of(held.rid), np.ones(len(held), bool)
        out.n = out.sorted_upto = out.live = len(held)
        out.embed_seq, out.gone_seq = held.embed_seq, held.gone_seq
        return out

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.rid, self.wid, self.ts, self.scale, self.alive, self.vec))

    def _alloc(self, cap: int) -> None:
        self.rid = np.zeros(cap, np.int64)
        self.wid = np.zeros(cap, np.int64)
        self.ts = np.zeros(cap, np.int64)
        self.scale = np.zeros(cap, np.float32)
        self.alive = np.zeros(cap, bool)
        self.vec = np.zeros((cap, self.dims), np.int8)

    def _grow(self, need: int) -> None:
        cap = len(self.rid)
        if need <= cap:
            return
        new = max(need, int(cap * 1.5) + 1024)
        old: list[npt.NDArray[Any]] = [self.rid, self.wid, self.ts, self.scale, self.alive, self.vec]
        self._alloc(new)
        fresh: list[npt.NDArray[Any]] = [self.rid, self.wid, self.ts, self.scale, self.alive, self.vec]
        for dst, src in zip(fresh, old):
            dst[:self.n] = src[:self.n]

    def _kill(self, rids: npt.NDArray[np.int64]) -> None:
        """Mark the rows of these row ids dead: binary search in the sorted part, a scan of the tail."""
        if not len(rids) or not self.n:
            return
        cut = self.sorted_upto
        at = np.searchsorted(self.rid[:cut], rids)
        at = at[at < cut]
        self.alive[at[np.isin(self.rid[at], rids)]] = False
        if self.n > cut:
            self.alive[cut:self.n][np.isin(self.rid[cut:self.n], rids)] = False
        self.live = int(np.count_nonzero(self.alive[:self.n]))

    @property
    def stale_share(self) -> float:
        return 0.0 if not self.n else 1 - self.live / self.n

    def apply(self, changes: EmbeddingChanges) -> None:
        """Fold in what the store changed since the counters held here."""
        rows = changes.rows
        rids = np.fromiter((r.rid for r in rows), np.int64, len(rows))
        self._kill(np.concatenate([np.asarray(changes.gone, np.int64), np.asarray(changes.other_model, np.int64),
                                   rids]))
        if rows:
            start = self.n
            self._grow(start + len(rows))
            end = start + len(rows)
            self.rid[start:end] = rids
            self.wid[start:end] = wids_of(rids)
            self.ts[start:end] = np.fromiter((r.ts for r in rows), np.int64, len(rows))
            self.scale[start:end] = np.fromiter((r.scale for r in rows), np.float32, len(rows))
            self.alive[start:end] = True
            self.vec[start:end] = np.frombuffer(b"".join(r.vec for r in rows), np.int8).reshape(len(rows), self.dims)
            self.n = end
            self.live = int(np.count_nonzero(self.alive[:self.n]))
            if start == 0 or end - self.sorted_upto > max(MIN_TAIL, self.sorted_upto // 4):
                self._merge()
        if self.stale_share > 0.25:
            self._merge()
        self.embed_seq, self.gone_seq = changes.embed_seq, changes.gone_seq

    def _merge(self) -> None:
        """Every live row into the sorted part (a row id is alive in one row at most)."""
        keep = np.flatnonzero(self.alive[:self.n])
        order = keep[np.argsort(self.rid[keep], kind="stable")]
        rid, wid, ts, scale, vec = self.rid[order], self.wid[order], self.ts[order], self.scale[order], self.vec[order]
        self.n = self.sorted_upto = self.live = len(order)
        self._alloc(0)
        self.rid, self.wid, self.ts, self.scale, self.vec = rid, wid, ts, scale, vec
        self.alive = np.ones(self.n, bool)

    def top(self, query: npt.NDArray[np.float32], *, allowed: npt.NDArray[np.bool_], role: str | None,
            since: int | None, until: int | None, floor: float, k: int, near: float = 0.0,
            least: float = 0.0
            ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], int]:
        """Row ids and similarities of the best `k` rows in scope at or above `floor` or within `near`
        of the best row's (when that reaches `least`), best first, and how many rows in scope reach that.
        `allowed[wid]`: whether window `wid` is in scope."""
        n = self.n
        if n == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32), 0
        wid = self.wid[:n]
        if len(allowed) <= int(wid.max()):  # a window newer than the caller's lookup: not in its scope
            allowed = np.concatenate([allowed, np.zeros(int(wid.max()) + 1 - len(allowed), bool)])
        mask = self.alive[:n] & allowed[wid]
        if role is not None:
            mask &= (self.rid[:n] & 1) == (1 if role == "assistant" else 0)
        if since is not None:
            mask &= self.ts[:n] >= since
        if until is not None:
            mask &= self.ts[:n] < until
        q8, qscale = _quantized(query)
        inside = int(np.count_nonzero(mask))
        if inside * 3 < n:
            rows = np.flatnonzero(mask)
            dots = _dot(q8, self.vec[rows])
            dots *= self.scale[rows]
        else:
            # every row scored, in place (a million rows: temporaries of 4 MB each cost as much as
            # the arithmetic), those out of scope then sunk
            dots = _dot(q8, self.vec[:n])
            dots *= self.scale[:n]
            if inside < n:
                dots[~mask] = -np.inf
            rows = np.arange(n)
        dots *= qscale
        best_dot = float(dots.max(initial=-np.inf))
        if best_dot >= least:
            floor = min(floor, best_dot - near)
        reach = int(np.count_nonzero(dots >= floor))
        if reach == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32), 0
        # the best k of all, then the floor: no array of every row above it (a low floor is most rows)
        top = np.argpartition(dots, len(dots) - k)[len(dots) - k:] if len(dots) > k else np.arange(len(dots))
        top = top[dots[top] >= floor]
        best = top[np.argsort(-dots[top], kind="stable")]
        return self.rid[rows[best]], dots[best].astype(np.float32), reach


def _quantized(query: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.int8], float]:
    peak = float(np.abs(query).max()) if query.size else 0.0
    scale = peak / 127 if peak > 0 else 1.0
    return np.clip(np.rint(query / scale), -127, 127).astype(np.int8), scale


def _dot(q8: npt.NDArray[np.int8], vecs: npt.NDArray[np.int8]) -> npt.NDArray[np.float32]:
    if len(vecs) == 0:
        return np.zeros(0, np.float32)
    out = simsimd.cdist(q8[None, :], np.ascontiguousarray(vecs), metric="dot", dtype="int8", out_dtype="float32")
    scores: npt.NDArray[np.float32] = np.asarray(out, dtype=np.float32)[0]
    return scores


class _Slot:
    __slots__ = ("store", "held", "lock", "loading")

    def __init__(self, store: AgentStore[Any]) -> None:
        self.store = store
        self.held: AgentVectors | None = None
        self.lock = asyncio.Lock()
        self.loading: asyncio.Task[AgentVectors] | None = None


class Vectors:
    """The search process's vectors, per agent store, with a lock each (a refresh and a scoring of
    the same agent never overlap), at most `max_bytes` of them: past that the least recently
    searched agents' are let go (their next search loads them again)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._by_store: OrderedDict[int, _Slot] = OrderedDict()

    def _slot(self, store: AgentStore[Any]) -> _Slot:
        entry = self._by_store.get(id(store))
        if entry is None or entry.store is not store:
            entry = _Slot(store)
            self._by_store[id(store)] = entry
        self._by_store.move_to_end(id(store))
        return entry

    def slot(self, store: AgentStore[Any]) -> tuple[AgentVectors | None, asyncio.Lock]:
        entry = self._slot(store)
        return entry.held, entry.lock

    def keep(self, store: AgentStore[Any], vectors: AgentVectors) -> None:
        self._slot(store).held = vectors
        total = sum(e.held.nbytes for e in self._by_store.values() if e.held is not None)
        for key, entry in list(self._by_store.items()):
            if total <= self.max_bytes:
                break
            if entry.store is not store and entry.held is not None and not entry.lock.locked():
                total -= entry.held.nbytes
                del self._by_store[key]

    async def load(self, store: AgentStore[Any], model: str, dims: int, wait: float
                   ) -> tuple[bool, AgentVectors | None]:
        """An agent's vectors for a process holding none: loaded from the store's packed blocks in
        a task of their own, which a search waits on for `wait` seconds at most. (True, vectors) once
        loaded (None: nothing embedded with `model` yet), (False, None) while the load goes on: the
        search answers without them and says `indexing: true`; the load is never held up by it, nor
        it by the load."""
        entry = self._slot(store)
        if entry.loading is None:
            entry.loading = asyncio.create_task(self._load(entry, model, dims))
            entry.loading.add_done_callback(_logged)
        task = entry.loading
        try:
            held = await asyncio.wait_for(asyncio.shield(task), wait)
        except TimeoutError:
            return False, None
        return True, held if held.model_no >= 0 else None

    async def _load(self, entry: _Slot, model: str, dims: int) -> AgentVectors:
        try:
            async with entry.store.reader() as reader:
                head = await entry.store.meaning_head(reader, model)
                if head.model_no is None:
                    return AgentVectors(-1, dims)
                held, changes = await entry.store.load_embeddings(reader, head.model_no, dims)
            vectors = await asyncio.to_thread(_assembled, held, changes, dims)
            if entry.held is None or entry.held.model_no != vectors.model_no:
                self.keep(entry.store, vectors)
            return vectors
        finally:
            entry.loading = None

    def clear(self) -> None:
        self._by_store.clear()

    async def aclose(self) -> None:
        """Let every agent's vectors go, the loads still going cancelled and awaited (before the
        stores they read close)."""
        loading = [e.loading for e in self._by_store.values() if e.loading is not None]
        self.clear()
        for task in loading:
            task.cancel()
        await asyncio.gather(*loading, return_exceptions=True)


def _logged(task: asyncio.Task[AgentVectors]) -> None:
    """A load that failed (the store unreachable, say) is logged; the next search starts another."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("search.vectors_load_failed", error=f"{type(exc).__name__}: {exc}")


def _assembled(held: Packed, changes: EmbeddingChanges, dims: int) -> AgentVectors:
    out = AgentVectors.of(held, dims)
    out.apply(changes)
    return out


@dataclass
class Meaning:
    """What a semantic search keeps beyond the keyword one: the vectors held in memory, and the
    similarity below which a row is no neighbour (the embedder and the embed queue are the
    host's: search/context.py)."""

    vectors: Vectors
    min_score: float | None = None  # None: the embedder's own floor
