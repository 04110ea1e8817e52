"""The embedder seam (SPEC §7): text in, unit vectors out, for the meaning index (SPEC §3).

An embedder names the model it embeds with (`model`, stored beside every embedding, so a change of
model or dimensions makes the stored ones stale) and turns a batch of texts into an array of
L2-normalised float32 rows, one a text, so a dot product is the cosine similarity. Embedding is
CPU or network work: it runs on the workers and for each semantic query, never on the append path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..settings import Settings


class Embedder(Protocol):
    model: str  # e.g. "builtin:l2_supercat_256" or "openai:nomic-embed-text:768"
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """`(len(texts), dimensions)` unit rows; raises `EmbedderFailed` naming what went wrong."""
        ...

    async def aclose(self) -> None: ...


class EmbedderFailed(Exception):
    """The embedder could not embed a batch (the endpoint down, slow, or answering something wrong):
    the message says what it did. Nothing of that batch is stored."""


def unit_rows(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Rows scaled to length 1; a row of no known token (all zeros) stays zero, similar to nothing."""
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def open_embedder(settings: Settings) -> Embedder | None:
    """The embedder the settings name, or None when it is `none` (semantic search disabled)."""
    if settings.embedder == "none":
        return None
    if settings.embedder == "builtin":
        from .builtin import BuiltinEmbedder

        return BuiltinEmbedder.load()
    raise ValueError(f"unknown embedder {settings.embedder!r}")
