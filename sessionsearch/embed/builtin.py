"""The default embedder: WordLlama's 256-dimension model, shipped inside its PyPI wheel, on the CPU.

Loaded from the package's own folder with downloads disabled (without `cache_dir` the library looks
elsewhere and tries the network), so the embedded shape works offline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from . import unit_rows

CONFIG = "l2_supercat"
DIMENSIONS = 256


class BuiltinEmbedder:
    def __init__(self, model: Any) -> None:
        self._model = model
        self.model = f"builtin:{CONFIG}_{DIMENSIONS}"
        self.dimensions = DIMENSIONS

    @classmethod
    def load(cls) -> BuiltinEmbedder:
        import wordllama

        return cls(wordllama.WordLlama.load(config=CONFIG, dim=DIMENSIONS, cache_dir=Path(wordllama.__file__).parent,
                                            disable_download=True))

    def embed_now(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The batch embedded on this thread (a worker's batch, or a bench)."""
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        vectors = np.asarray(self._model.embed(list(texts), norm=False), dtype=np.float32)
        return unit_rows(vectors)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await asyncio.to_thread(self.embed_now, texts)

    async def aclose(self) -> None:
        return None
