"""The embedder interface: text in, unit vectors out (embed/__init__.py opens the one configured)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


class Embedder(Protocol):
    model: str  # e.g. "builtin:l2_supercat_256" or "openai:nomic-embed-text:768"
    dimensions: int
    # the model's own similarity floor (`search.semanticMinScore` unset): cosines spread differently
    # per model, so a floor calibrated for one means nothing for another
    min_score: float
    # below this best similarity a search has no near neighbour and finds nothing; between it and
    # `min_score` only the rows near the best one answer (weak neighbours: a question in one
    # language about messages in another)
    least_score: float
    # hybrid search's weight of a row holding the query's rare words, beside a similarity scaled to
    # [0, 1] (search/meaning.py `fuse`): the weaker the model's neighbours, the more the words count;
    # measured per model on bench/bench_quality.py's set
    keyword_weight: float
    # rows the embed job gives one call at most: one call must end well inside the claim's lease
    # (60 s) on a loaded core, and a lost lease loses no more than one call's work
    batch_rows: int

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """`(len(texts), dimensions)` unit rows; raises `EmbedderFailed` naming what went wrong."""
        ...

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """A search query's unit vector (a model trained with query and passage prefixes embeds it as
        a query; the others as any text)."""
        ...

    async def aclose(self) -> None: ...


class EmbedderFailed(Exception):
    """The embedder could not embed a batch (the endpoint down, slow, or answering something wrong):
    the message says what it did. Nothing of that batch is stored."""


# Texts are cut to this many characters before they are embedded. A message's subject is set by its
# start, and a bag-of-tokens or a model's window blurs or refuses thousands of tokens anyway; the cut
# bounds one message's cost (a pasted 10 MB log would cost what ~30,000 ordinary messages cost) and
# keeps every text inside an endpoint's input window: 4,096 characters is ~1,000 English tokens and at
# most ~4,500 CJK ones, under the 8,192 of nomic-embed-text and OpenAI's models.
TEXT_MAX_CHARS = 4096


def bounded(text: str) -> str:
    """The text as it is embedded: at most TEXT_MAX_CHARS characters."""
    return text[:TEXT_MAX_CHARS]


def unit_rows(vectors: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.float32]:
    """Rows scaled to length 1, as float32; a row of no known token (all zeros) stays zero, similar to
    nothing."""
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    units: npt.NDArray[np.float32] = np.divide(vectors, norms, out=np.zeros_like(vectors),
                                               where=norms > 0).astype(np.float32, copy=False)
    return units
