"""One agent's embeddings of the current model, in memory, for exact nearest-neighbour search.

Loaded from the store once, then refreshed by the store's change counters (rows stored after the
last one held, deletions after the last one applied), so a search pays for what changed only.
Rows live in a part sorted by row id (looked up by binary search) and a tail of recent rows (looked
up in a dict), merged into the sorted part once the tail grows; a replaced or deleted row is marked
dead in place. Vectors are int8 with a per-row scale, as stored: 256 dimensions take 256 bytes a
row, ~280 MB per million rows with ids, windows, times and scales. Scoring is an int8 dot product
over every row in scope (simsimd's SIMD kernels), exact up to the quantization.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import simsimd

from ..store.base import AgentStore, EmbeddingChanges
from ..store.rowids import HIGH, LOW_BITS, SEQ_BITS

MIN_TAIL = 50_000  # rows the tail holds before it is merged, at least


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
        self.sorted_upto = 0  # rows [0, sorted_upto) are sorted by row id
        self.tail: dict[int, int] = {}  # row id -> row, for rows past sorted_upto
        self.live = 0
        self._alloc(0)

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

    def _find(self, rid: int) -> int:
        row = self.tail.get(rid)
        if row is not None:
            return row
        i = int(np.searchsorted(self.rid[:self.sorted_upto], rid))
        if i < self.sorted_upto and self.rid[i] == rid and self.alive[i]:
            return i
        return -1

    def _kill(self, rid: int) -> None:
        row = self._find(rid)
        if row >= 0 and self.alive[row]:
            self.alive[row] = False
            self.live -= 1
        self.tail.pop(rid, None)

    @property
    def stale_share(self) -> float:
        return 0.0 if not self.n else 1 - self.live / self.n

    def apply(self, changes: EmbeddingChanges) -> None:
        """Fold in what the store changed since the counters held here."""
        for rid in changes.gone:
            self._kill(rid)
        for rid in changes.other_model:
            self._kill(rid)
        rows = changes.rows
        if rows:
            rids = np.fromiter((r.rid for r in rows), np.int64, len(rows))
            if self.n:
                for rid in rids.tolist():
                    self._kill(rid)
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
            self.live += len(rows)
            if start == 0 or end - self.sorted_upto > max(MIN_TAIL, self.sorted_upto // 4):
                self._merge()
            else:
                self.tail.update((rid, start + i) for i, rid in enumerate(rids.tolist()))
        if self.stale_share > 0.25:
            self._merge()
        self.embed_seq, self.gone_seq = changes.embed_seq, changes.gone_seq

    def _merge(self) -> None:
        """Every live row into the sorted part (a duplicate row id keeps its newest row)."""
        keep = np.flatnonzero(self.alive[:self.n])
        order = keep[np.argsort(self.rid[keep], kind="stable")]
        rid, wid, ts, scale, vec = self.rid[order], self.wid[order], self.ts[order], self.scale[order], self.vec[order]
        self.n = self.sorted_upto = self.live = len(order)
        self._alloc(0)
        self.rid, self.wid, self.ts, self.scale, self.vec = rid, wid, ts, scale, vec
        self.alive = np.ones(self.n, bool)
        self.tail = {}

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
        rows = np.flatnonzero(mask) if mask.sum() * 3 < n else None
        if rows is not None:
            dots = _dot(q8, self.vec[rows]) * self.scale[rows] * qscale
        else:
            dots = _dot(q8, self.vec[:n]) * self.scale[:n] * qscale
            dots[~mask] = -np.inf
            rows = np.arange(n)
        best_dot = float(dots.max(initial=-np.inf))
        if best_dot >= least:
            floor = min(floor, best_dot - near)
        reach = int(np.count_nonzero(dots >= floor))
        if reach == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32), 0
        # the best k of all, then the floor: no array of every row above it (a low floor is most rows)
        top = np.argpartition(-dots, k - 1)[:k] if len(dots) > k else np.arange(len(dots))
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


class Vectors:
    """The search process's vectors, per agent store, with a lock each: a refresh and a scoring
    of the same agent never overlap."""

    def __init__(self) -> None:
        self._by_store: dict[int, tuple[AgentStore[Any], AgentVectors | None, asyncio.Lock]] = {}

    def slot(self, store: AgentStore[Any]) -> tuple[AgentVectors | None, asyncio.Lock]:
        entry = self._by_store.get(id(store))
        if entry is None or entry[0] is not store:
            entry = (store, None, asyncio.Lock())
            self._by_store[id(store)] = entry
        return entry[1], entry[2]

    def keep(self, store: AgentStore[Any], vectors: AgentVectors) -> None:
        entry = self._by_store[id(store)]
        self._by_store[id(store)] = (store, vectors, entry[2])

    def clear(self) -> None:
        self._by_store.clear()


@dataclass
class Meaning:
    """What a semantic search keeps beyond the keyword one: the vectors held in memory, and the
    similarity below which a row is no neighbour (the embedder and the embed queue are the
    host's: search/context.py)."""

    vectors: Vectors
    min_score: float | None = None  # None: the embedder's own floor
