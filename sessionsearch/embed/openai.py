"""An embedder for any OpenAI-compatible `POST /v1/embeddings` endpoint (Ollama, vLLM,
text-embeddings-inference, OpenAI), over asyncio streams and the standard library.

Every answer is checked before a vector of it is believed: the status, the JSON, one vector an
input in `index` order, the dimensions, finite values and a cap on the body's size. What the
endpoint did wrong is the `EmbedderFailed` message (status, a short cut of its body); nothing of a
failed batch is returned. The key goes only into the `Authorization` header, never into a message,
a log or a repr.

One connection a request (`Connection: close`): a batch of texts is far more work for the endpoint
than a connection is, and nothing is left half-read between requests.
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
import structlog

from . import EmbedderFailed, bounded, unit_rows

MAX_BODY_BYTES = 64 * 1024 * 1024  # ~10,000 vectors of 1,536 floats as JSON text; more is not an answer
MAX_HEAD_BYTES = 64 * 1024
BODY_SHOWN_CHARS = 200  # of an error body, in a message
CONNECT_TIMEOUT_S = 10.0
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

log = structlog.get_logger("sessionsearch.embed")


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
        self._host_header = parts.netloc.rpartition("@")[2]  # user:password@ never goes into messages
        self.url = f"{parts.scheme}://{self._host_header}{path}"
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._tls = parts.scheme == "https"
        self._path = path + (f"?{parts.query}" if parts.query else "")
        if api_key is not None and not (api_key.isascii() and api_key.isprintable() and " " not in api_key):
            raise ValueError("the embedder API key must be printable ASCII without spaces")  # it is a header
        self._api_key = api_key
        self.model_name = model_name
        if dimensions < 1:
            raise ValueError(f"dimensions must be 1 or more, not {dimensions}")
        self.dimensions = dimensions
        self.model = f"openai:{model_name}:{dimensions}"
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
        """(status, body) of one POST, within `timeout_s`; _Retryable when unreachable or slow."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._exchange(body)
        except TimeoutError:
            raise _Retryable(f"embedder {self.url} timed out after {self.timeout_s:g} s") from None
        except asyncio.IncompleteReadError:
            raise _Retryable(f"embedder {self.url} closed the connection mid-answer") from None
        except ssl.SSLCertVerificationError as exc:  # asking again meets the same certificate
            raise EmbedderFailed(f"embedder {self.url} has a certificate this host does not trust: "
                                 f"{exc.verify_message}") from None
        except (OSError, ssl.SSLError) as exc:
            raise _Retryable(f"embedder {self.url} unreachable: {type(exc).__name__}: {exc}") from None

    async def _exchange(self, body: bytes) -> tuple[int, bytes]:
        if self._tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        connect_s = min(CONNECT_TIMEOUT_S, self.timeout_s)
        try:
            async with asyncio.timeout(connect_s):
                reader, writer = await asyncio.open_connection(
                    self._host, self._port, ssl=self._ssl if self._tls else None, limit=MAX_HEAD_BYTES)
        except TimeoutError:
            raise _Retryable(f"connecting to embedder {self.url} timed out after {connect_s:g} s") from None
        try:
            head = [f"POST {self._path} HTTP/1.1", f"Host: {self._host_header}",
                    "Content-Type: application/json", "Accept: application/json",
                    f"Content-Length: {len(body)}", "Connection: close", "User-Agent: sessionsearch"]
            if self._api_key:
                head.append(f"Authorization: Bearer {self._api_key}")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()
            answer = await self._response(reader)
        except BaseException:
            writer.transport.abort()  # timed out or failed: no polite TLS shutdown to wait for
            raise
        writer.close()
        return answer

    async def _response(self, reader: asyncio.StreamReader) -> tuple[int, bytes]:
        status_line = await self._line(reader)
        fields = status_line.split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/") or not fields[1].isdigit():
            raise EmbedderFailed(f"embedder {self.url} answered no HTTP status line: {status_line[:80]!r}")
        status = int(fields[1])
        headers: dict[str, str] = {}
        while line := await self._line(reader):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return status, await self._chunked(reader)
        if "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise EmbedderFailed(f"embedder {self.url} answered a bad Content-Length "
                                     f"{headers['content-length'][:40]!r}") from None
            self._check_size(length)
            return status, await reader.readexactly(length)
        data = await reader.read(self.max_body_bytes + 1)  # no length: the body runs to the close
        while len(data) <= self.max_body_bytes and (more := await reader.read(self.max_body_bytes + 1 - len(data))):
            data += more
        self._check_size(len(data))
        return status, data

    async def _line(self, reader: asyncio.StreamReader) -> str:
        try:
            raw = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise EmbedderFailed(f"embedder {self.url} answered a header line over {MAX_HEAD_BYTES} bytes") from None
        return raw.decode("latin-1").rstrip("\r\n")

    async def _chunked(self, reader: asyncio.StreamReader) -> bytes:
        data = bytearray()
        while True:
            size_line = await self._line(reader)
            try:
                size = int(size_line.split(";", 1)[0].strip(), 16)
            except ValueError:
                raise EmbedderFailed(f"embedder {self.url} answered a bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                while await self._line(reader):  # trailers
                    pass
                return bytes(data)
            self._check_size(len(data) + size)
            data += await reader.readexactly(size)
            await reader.readexactly(2)  # the CRLF after the chunk

    def _check_size(self, size: int) -> None:
        if size > self.max_body_bytes:
            raise EmbedderFailed(f"embedder {self.url} answered a body over {self.max_body_bytes:,} bytes "
                                 f"(refused unread)")

    def _vectors(self, status: int, body: bytes, count: int) -> npt.NDArray[np.float32]:
        """The answer's vectors as unit rows, or EmbedderFailed saying what is wrong with it."""
        where = f"embedder {self.url}"
        if status != 200:
            shown = body[:BODY_SHOWN_CHARS * 4].decode("utf-8", "replace")
            if self._api_key:  # an endpoint may echo what it was sent; the key stays out of messages
                shown = shown.replace(self._api_key, "***")
            shown = shown[:BODY_SHOWN_CHARS]
            message = f"{where} answered HTTP {status}: {shown!r}"
            if status in RETRY_STATUSES:
                raise _Retryable(message)
            raise _Refused(message, shown)
        try:
            answer = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise EmbedderFailed(f"{where} answered no JSON: {body[:80]!r}") from None
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
        vectors = np.array(rows, dtype=np.float64)
        if not np.isfinite(vectors).all():
            raise EmbedderFailed(f"{where} answered values that are not finite numbers (NaN or infinity)")
        return unit_rows(vectors)  # scaled in float64: a row of huge values stays finite
