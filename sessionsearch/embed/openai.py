"""An embedder for any OpenAI-compatible `POST /v1/embeddings` endpoint (Ollama, vLLM,
text-embeddings-inference, OpenAI), over httpx.

Every answer is checked before a vector of it is believed: the status, the JSON, one vector an
input in `index` order, the dimensions, finite values and a cap on the body's size. Whatever the
endpoint does wrong, however malformed (a header block without end, a bad `Content-Length`, JSON
nested past the parser's depth, an integer no float holds), is an `EmbedderFailed` whose message
says what it did (status, a short cut of its body); nothing of a failed batch is returned, so a
search meeting it degrades to its keyword hits. The key goes only into the `Authorization` header,
never into a message, a log or a repr: a shown body has it masked wherever the endpoint echoes it.

A client a request, no connection kept: a batch of texts is far more work for the endpoint than a
connection is, and the embedder is called from several event loops (the web process's, each
worker thread's), which one pooled client could not serve. The TLS context is made once.
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
from collections.abc import Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx2
import numpy as np
import numpy.typing as npt
import structlog

from .base import EmbedderFailed, bounded, unit_rows

MAX_BODY_BYTES = 64 * 1024 * 1024  # ~10,000 vectors of 1,536 floats as JSON text; more is not an answer
BODY_SHOWN_CHARS = 200  # of an error body, in a message
CONNECT_TIMEOUT_S = 10.0
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# httpcore bounds the status line and header block together (100 KiB) and refuses a Content-Length
# that is not a non-negative integer; these are the answers' other bounds

log = structlog.get_logger("sessionsearch.embed")
_E = TypeVar("_E", bound=BaseException)


class _Retryable(EmbedderFailed):
    """A failure another try may not meet (unreachable, timed out, 429, 5xx)."""


class _Refused(EmbedderFailed):
    """An answer of 4xx (but 408 and 429): the request itself was wrong. `body` is its start."""

    def __init__(self, message: str, body: str) -> None:
        super().__init__(message)
        self.body = body


class OpenAIEmbedder:
    """Embeds through `url` with `model_name` into `dimensions`, which every answer must have.

    The dimensions are known before the first request because the meaning index reads `model` and
    `dimensions` before it embeds anything (the identity is stored beside each embedding). They
    are sent as `dimensions`, which lets a model that can shorten its vectors do so; an endpoint
    that refuses the field for a model that cannot (vLLM, older OpenAI models) is asked again
    without it, once, and from then on.
    """

    def __init__(self, *, url: str, model_name: str, dimensions: int, api_key: str | None = None,
                 batch_texts: int = 64, timeout_s: float = 30.0, attempts: int = 4, backoff_s: float = 0.5,
                 max_body_bytes: int = MAX_BODY_BYTES) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"embedder URL must be http:// or https:// with a host, not {url!r}")
        path = parts.path.rstrip("/")
        if not path.endswith("/embeddings"):
            path += "/embeddings" if path.endswith("/v1") else "/v1/embeddings"
        host = parts.netloc.rpartition("@")[2]  # user:password@ never goes into messages
        self.url = f"{parts.scheme}://{host}{path}"
        self._target = self.url + (f"?{parts.query}" if parts.query else "")
        if api_key is not None and not (api_key.isascii() and api_key.isprintable() and " " not in api_key):
            raise ValueError("the embedder API key must be printable ASCII without spaces")  # it is a header
        self._api_key = api_key
        self.model_name = model_name
        if dimensions < 1:
            raise ValueError(f"dimensions must be 1 or more, not {dimensions}")
        self.dimensions = dimensions
        self.model = f"openai:{model_name}:{dimensions}"
        # an endpoint's model is unknown here: the floor calibrated for the builtin one, until the
        # operator sets search.semanticMinScore for theirs
        self.min_score = 0.175
        self.least_score = 0.16
        # between the built-in models' weights: their recall@5 at 0.3 is in docs/operations/embedder.md
        self.keyword_weight = 0.3
        self.batch_rows = 512  # several requests of batch_texts, each with its own time-out
        self._send_dimensions = True
        self.batch_texts = batch_texts
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_body_bytes = max_body_bytes
        self._ssl: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(url={self.url!r}, model={self.model!r})"

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        parts = [await self._batch(list(texts[i:i + self.batch_texts]))
                 for i in range(0, len(texts), self.batch_texts)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        vector: npt.NDArray[np.float32] = (await self.embed([text]))[0]
        return vector

    async def aclose(self) -> None:
        return None

    async def _batch(self, texts: list[str]) -> npt.NDArray[np.float32]:
        request: dict[str, Any] = {"model": self.model_name, "input": [bounded(t) for t in texts]}
        attempt = 0
        while True:
            attempt += 1
            if self._send_dimensions:
                request["dimensions"] = self.dimensions
            else:
                request.pop("dimensions", None)
            try:
                status, answer = await self._post(json.dumps(request, ensure_ascii=False).encode())
                return self._vectors(status, answer, len(texts))
            except _Refused as exc:
                if not (self._send_dimensions and "dimension" in exc.body.lower()):
                    raise
                self._send_dimensions = False  # the answers are still held to self.dimensions
                log.warning("embed.dimensions_refused", url=self.url, error=str(exc))
                attempt -= 1
            except _Retryable as exc:
                if attempt >= self.attempts:
                    raise EmbedderFailed(f"{exc} (after {attempt} attempt{'s' if attempt > 1 else ''})") from None
                # jittered: many workers retrying one endpoint do not come back in step
                delay_s = random.uniform(0.5, 1.0) * self.backoff_s * 2 ** (attempt - 1)
                log.warning("embed.retry", url=self.url, attempt=attempt, error=str(exc), delay_s=round(delay_s, 3))
                await asyncio.sleep(delay_s)

    async def _post(self, body: bytes) -> tuple[int, bytes]:
        """(status, body) of one POST, within `timeout_s` in all; _Retryable when unreachable or slow."""
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "Accept-Encoding": "identity", "User-Agent": "sessionsearch"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        if self._ssl is None:  # made once: httpx would build one a client (~50 ms), even for http://
            self._ssl = ssl.create_default_context()
        timeout = httpx2.Timeout(self.timeout_s, connect=min(CONNECT_TIMEOUT_S, self.timeout_s))
        try:
            # the overall bound: httpx's timeouts are per operation, and an endpoint trickling a
            # byte a second never trips them
            async with asyncio.timeout(self.timeout_s):
                async with httpx2.AsyncClient(verify=self._ssl, timeout=timeout, trust_env=False,
                                              follow_redirects=False) as client:
                    async with client.stream("POST", self._target, content=body, headers=headers) as answer:
                        return answer.status_code, await self._read(answer)
        except TimeoutError:
            raise _Retryable(f"embedder {self.url} timed out after {self.timeout_s:g} s") from None
        except httpx2.TimeoutException as exc:
            raise _Retryable(f"embedder {self.url} timed out ({type(exc).__name__})") from None
        except httpx2.ConnectError as exc:
            if (verify := _cause(exc, ssl.SSLCertVerificationError)) is not None:
                # asking again meets the same certificate
                raise EmbedderFailed(f"embedder {self.url} has a certificate this host does not trust: "
                                     f"{verify.verify_message}") from None
            raise _Retryable(f"embedder {self.url} unreachable: {self._masked(_root(exc))}") from None
        except httpx2.RemoteProtocolError as exc:
            # a dropped connection, or an answer that is not HTTP (no status line, a header block
            # over httpcore's bound, a bad Content-Length): retried, a next answer may be whole
            raise _Retryable(f"embedder {self.url} answered no valid HTTP: {self._masked(str(exc))[:200]}") from None
        except httpx2.TransportError as exc:
            raise _Retryable(f"embedder {self.url} unreachable: {self._masked(_root(exc))[:200]}") from None

    async def _read(self, answer: httpx2.Response) -> bytes:
        """The body, refused unread when its declared length is over the cap, cut off when it grows past."""
        declared = answer.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise EmbedderFailed(f"embedder {self.url} answered a body over {self.max_body_bytes:,} bytes "
                                 f"(refused unread)")
        data = bytearray()
        async for piece in answer.aiter_raw():
            data += piece
            if len(data) > self.max_body_bytes:
                raise EmbedderFailed(f"embedder {self.url} answered a body over {self.max_body_bytes:,} bytes "
                                     f"(cut off)")
        return bytes(data)

    def _masked(self, text: str) -> str:
        """`text` with the key masked: an endpoint may echo what it was sent, headers included."""
        return text.replace(self._api_key, "***") if self._api_key else text

    def _shown(self, body: bytes) -> str:
        return self._masked(body[:BODY_SHOWN_CHARS * 4].decode("utf-8", "replace"))[:BODY_SHOWN_CHARS]

    def _vectors(self, status: int, body: bytes, count: int) -> npt.NDArray[np.float32]:
        """The answer's vectors as unit rows, or EmbedderFailed saying what is wrong with it."""
        where = f"embedder {self.url}"
        if status != 200:
            shown = self._shown(body)
            message = f"{where} answered HTTP {status}: {shown!r}"
            if status in RETRY_STATUSES:
                raise _Retryable(message)
            raise _Refused(message, shown)
        try:
            answer = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            # RecursionError: nesting past the parser's depth; ValueError includes an integer over
            # the interpreter's digit limit
            start = body.replace(self._api_key.encode(), b"***") if self._api_key else body
            raise EmbedderFailed(f"{where} answered no JSON: {start[:80]!r}") from None
        items = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise EmbedderFailed(f"{where} answered no `data` list of objects")
        if len(items) != count:
            raise EmbedderFailed(f"{where} answered {len(items)} vectors for {count} inputs")
        if all("index" in item for item in items):
            order = [item["index"] for item in items]
            if sorted(order, key=lambda i: i if isinstance(i, int) else -1) != list(range(count)):
                raise EmbedderFailed(f"{where} answered indexes that are not 0..{count - 1} once each")
            items = sorted(items, key=lambda item: item["index"])
        rows = [item.get("embedding") for item in items]
        # JSON numbers only: numpy would take "0.1" as 0.1 and null as NaN without a word
        if not all(isinstance(r, list) and r and all(type(x) is float or type(x) is int for x in r) for r in rows):
            raise EmbedderFailed(f"{where} answered an `embedding` that is not a list of numbers")
        sizes = {len(r) for r in rows}
        if sizes != {self.dimensions}:
            shown = ", ".join(str(s) for s in sorted(sizes))
            raise EmbedderFailed(f"{where} answered vectors of {shown} dimensions, not {self.dimensions} "
                                 f"(search.embedderDimensions)")
        try:
            vectors = np.array(rows, dtype=np.float64)
        except OverflowError:  # an integer past a float's range: 1e309 written out in digits
            raise EmbedderFailed(f"{where} answered a number too large for a float") from None
        if not np.isfinite(vectors).all():
            raise EmbedderFailed(f"{where} answered values that are not finite numbers (NaN or infinity)")
        return unit_rows(vectors)  # scaled in float64: a row of huge values stays finite


def _cause(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first exception of `kind` in `exc`'s chain of causes, or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _root(exc: BaseException) -> str:
    """`Kind: message` of the deepest cause in `exc`'s chain (the OS's refusal behind a ConnectError)."""
    while (below := exc.__cause__ or exc.__context__) is not None:
        exc = below
    return f"{type(exc).__name__}: {exc}"
