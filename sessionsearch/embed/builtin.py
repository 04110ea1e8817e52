"""The default embedder: WordLlama's 256-dimension model, shipped inside its PyPI wheel, on the CPU.

Loaded from the package's own folder with downloads disabled (without `cache_dir` the library looks
elsewhere and tries the network), so the embedded shape works offline.

The model is a table of token vectors whose mean is the text's vector. The mean is taken here over
the tokens of each text laid end to end, not through the library's `embed`, which pads every text
of a batch to its longest: at ordinary message lengths the padding multiplies the work, and one
long text in a batch of 64 makes 64 long ones of memory.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .base import bounded, unit_rows

CONFIG = "l2_supercat"
DIMENSIONS = 256
MIN_SCORE = 0.175  # calibrated by bench/bench_meaning.py
# unrelated queries score 0.07-0.15 against a small corpus, a cross-language question's best row
# 0.15-0.4 (bench/bench_quality.py's set: 5th percentile 0.147, median 0.40)
LEAST_SCORE = 0.16
# hybrid: a row holding the query's rare words adds 0.75 to a similarity scaled to [0, 1] (search/meaning.py
# `fuse`): this model's neighbours are weak outside English (bench/bench_quality.py)
KEYWORD_WEIGHT = 0.75
# token vectors gathered at once (4 bytes x 256 each: 32 MiB), whatever the batch's texts hold
CHUNK_TOKENS = 32_768
# texts tokenized at once: their token ids are Python lists for a while (up to ~30 MB for 1,024 cut texts)
SLICE_TEXTS = 1024


class BuiltinEmbedder:
    def __init__(self, model: Any) -> None:
        self._table: npt.NDArray[np.float32] = np.ascontiguousarray(model.embedding, dtype=np.float32)
        self._tokenizer = model.tokenizer
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        # without offsets where the tokenizers release has it (0.20 on)
        self._encode = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        self.model = f"builtin:{CONFIG}_{DIMENSIONS}"
        self.dimensions = DIMENSIONS
        self.min_score = MIN_SCORE
        self.least_score = LEAST_SCORE
        self.keyword_weight = KEYWORD_WEIGHT
        self.batch_rows = 512  # ~0.1 s of one core

    @classmethod
    def load(cls) -> BuiltinEmbedder:
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        import wordllama  # its import calls logging.basicConfig(INFO): the process's logging is not its own

        root.handlers[:], root.level = handlers, level
        return cls(wordllama.WordLlama.load(config=CONFIG, dim=DIMENSIONS, cache_dir=Path(wordllama.__file__).parent,
                                            disable_download=True))

    def embed_now(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The batch embedded on this thread (a worker's batch, or a bench)."""
        if len(texts) <= SLICE_TEXTS:
            return self._embed_slice(texts)
        return np.concatenate([self._embed_slice(texts[i:i + SLICE_TEXTS]) for i in range(0, len(texts), SLICE_TEXTS)])

    def _embed_slice(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        # runs of whitespace cut into "▁" tokens that say nothing; a text of none but them is empty
        rows = [(i, " ".join(bounded(t).split())) for i, t in enumerate(texts)]
        rows = [(i, t) for i, t in rows if t]
        if not rows:
            return out
        encoded = self._encode([t for _, t in rows], add_special_tokens=False)
        ids = [e.ids for e in encoded]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
        np.clip(flat, 0, len(self._table) - 1, out=flat)
        ends = np.cumsum(lengths)
        sums = np.zeros((len(rows), DIMENSIONS), dtype=np.float32)
        start_row = 0
        while start_row < len(rows):
            # the rows whose tokens fit in one gather (at least one row, however long)
            base = ends[start_row - 1] if start_row else 0
            stop_row = max(start_row + 1, int(np.searchsorted(ends, base + CHUNK_TOKENS, side="right")))
            starts = np.concatenate(([0], ends[start_row:stop_row - 1] - base))
            part = lengths[start_row:stop_row] > 0
            gathered = self._table[flat[base:ends[stop_row - 1]]]
            if part.all():
                sums[start_row:stop_row] = np.add.reduceat(gathered, starts, axis=0)
            elif part.any():  # reduceat gives an empty run the next row's value: only runs with tokens
                sums[start_row:stop_row][part] = np.add.reduceat(gathered, starts[part], axis=0)
            start_row = stop_row
        out[[i for i, _ in rows]] = unit_rows(sums)  # a mean and a sum point the same way
        return out

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await asyncio.to_thread(self.embed_now, texts)

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        vector: npt.NDArray[np.float32] = (await self.embed([text]))[0]
        return vector

    async def aclose(self) -> None:
        return None
