"""An agent's embeddings packed in blocks: many rows per stored row, each column one byte string.

The per-row table (one embedding per index row, store/*/meaning.py) is what the embed job writes
and what a search process reads to catch up; a process starting cold would read it row by row,
~1.3 s at 200,000 rows and ~14 s at 1,000,000 on PostgreSQL (issue 39), in every process. The fold
(`fold_due` / `fold`) copies it, as of one snapshot, into blocks of BLOCK_ROWS rows sorted by row id:
row ids and times as little-endian int64, scales as float32, vectors as int8 rows, so a cold load is
a few hundred large reads decoded by numpy.frombuffer, then the rows stored or deleted after the
fold's counters read from the per-row table as before. The fold is redone from the last one plus
the rows since, once those reach FOLD_MIN_ROWS and an eighth of the folded ones (geometric: a
row is folded a few times in its life), by the embed job that stored them (indexer/embedding.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .records import EmbeddingChanges

BLOCK_ROWS = 4096  # rows a block holds: 1 MiB of 256-dimension vectors
FOLD_MIN_ROWS = 10_000  # rows stored since the last fold before a fold is due
FOLD_SHARE = 8  # ... and at least 1/FOLD_SHARE of the rows folded then


@dataclass
class Packed:
    """Embeddings of one model, sorted by row id (unique), with the counters they are as of."""

    model_no: int
    embed_seq: int
    gone_seq: int
    rid: npt.NDArray[np.int64]
    ts: npt.NDArray[np.int64]
    scale: npt.NDArray[np.float32]
    vec: npt.NDArray[np.int8]  # (rows, dimensions)

    def __len__(self) -> int:
        return len(self.rid)


Block = tuple[int, bytes, bytes, bytes, bytes]  # rows, row ids, times, scales, vectors


def fold_due(folded: int, since: int) -> bool:
    """Whether `since` rows stored after a fold of `folded` rows make a new fold worth its cost."""
    return since >= max(FOLD_MIN_ROWS, folded // FOLD_SHARE, 1)


class Unpacker:
    """Blocks decoded as they are read (the read of the next one overlapping the decoding of this
    one), into arrays of the fold's row count made once."""

    def __init__(self, model_no: int, embed_seq: int, gone_seq: int, dims: int, rows: int) -> None:
        self.out = Packed(model_no, embed_seq, gone_seq, np.empty(rows, np.int64), np.empty(rows, np.int64),
                          np.empty(rows, np.float32), np.empty((rows, dims), np.int8))
        self.dims = dims
        self.at = 0

    def add(self, block: Block) -> None:
        rows, rids, times, scales, vecs = block
        at, end = self.at, self.at + rows
        if end > len(self.out):
            raise ValueError(f"the blocks hold more rows than their fold's {len(self.out)}")
        self.out.rid[at:end] = np.frombuffer(rids, "<i8")
        self.out.ts[at:end] = np.frombuffer(times, "<i8")
        self.out.scale[at:end] = np.frombuffer(scales, "<f4")
        self.out.vec[at:end] = np.frombuffer(vecs, np.int8).reshape(rows, self.dims)
        self.at = end

    def done(self) -> Packed:
        if self.at != len(self.out):
            raise ValueError(f"the blocks hold {self.at} rows, their fold {len(self.out)}")
        return self.out


def from_blocks(model_no: int, embed_seq: int, gone_seq: int, dims: int, blocks: list[Block]) -> Packed:
    """The blocks as read back (in block order), decoded."""
    out = Unpacker(model_no, embed_seq, gone_seq, dims, sum(b[0] for b in blocks))
    for block in blocks:
        out.add(block)
    return out.done()


def to_blocks(packed: Packed) -> Iterator[Block]:
    for at in range(0, len(packed), BLOCK_ROWS):
        end = min(at + BLOCK_ROWS, len(packed))
        yield (end - at, packed.rid[at:end].astype("<i8").tobytes(), packed.ts[at:end].astype("<i8").tobytes(),
               packed.scale[at:end].astype("<f4").tobytes(), packed.vec[at:end].tobytes())


def empty(model_no: int, dims: int) -> Packed:
    return from_blocks(model_no, 0, 0, dims, [])


def with_changes(packed: Packed, changes: EmbeddingChanges, dims: int) -> Packed:
    """`packed` with the changes read after its counters folded in: rows deleted, or stored again
    (under this model or another), leave; rows stored under this model come in (read from the
    table in the same snapshot as the deletions, they are there now); sorted again."""
    rows = changes.rows
    new_rid = np.fromiter((r.rid for r in rows), np.int64, len(rows))
    leaving = np.concatenate([np.asarray(changes.gone, np.int64), np.asarray(changes.other_model, np.int64),
                              new_rid])
    keep = ~np.isin(packed.rid, leaving) if len(leaving) else np.ones(len(packed), bool)
    if rows:
        # the last of a row id stored twice in the changes wins (they come in storing order)
        _, last = np.unique(new_rid[::-1], return_index=True)
        pick = len(rows) - 1 - last
        new_vec = np.frombuffer(b"".join(r.vec for r in rows), np.int8).reshape(len(rows), dims)[pick]
        new_ts = np.fromiter((r.ts for r in rows), np.int64, len(rows))[pick]
        new_scale = np.fromiter((r.scale for r in rows), np.float32, len(rows))[pick]
        new_rid = new_rid[pick]
    else:
        new_rid, new_ts = np.zeros(0, np.int64), np.zeros(0, np.int64)
        new_scale, new_vec = np.zeros(0, np.float32), np.zeros((0, dims), np.int8)
    rid = np.concatenate([packed.rid[keep], new_rid])
    order = np.argsort(rid, kind="stable")
    return Packed(packed.model_no, changes.embed_seq, changes.gone_seq, rid[order],
                  np.concatenate([packed.ts[keep], new_ts])[order],
                  np.concatenate([packed.scale[keep], new_scale])[order],
                  np.concatenate([packed.vec[keep], new_vec])[order])
