"""A real OpenAI-compatible `POST /v1/embeddings` server on loopback, for the openai embedder's tests.

Its answers are real: the vectors are the builtin model's. A script of faults makes the next
requests go wrong the ways an endpoint does (an HTTP error, a slow answer, wrong dimensions, NaN,
a huge body, a shuffled order, a dropped connection); every request is recorded.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sessionsearch.embed.builtin import BuiltinEmbedder

_model: BuiltinEmbedder | None = None
_model_lock = threading.Lock()


def builtin() -> BuiltinEmbedder:
    global _model
    with _model_lock:
        if _model is None:
            _model = BuiltinEmbedder.load()
        return _model


def self_signed(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """A certificate for 127.0.0.1 (its file, for a client to trust) and a server context serving it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return cert_file, context


@dataclass
class Fault:
    """What the endpoint does to one request instead of answering it well."""

    # status | sleep | dims | nan | huge_declared | huge_chunked | shuffle | fewer | garbage | drop | replace
    # | raw (`body` written as the whole answer, status line and headers included) | endless_headers
    # | echo (a 200 of the request's own header lines, as a misconfigured proxy's error page shows them)
    kind: str
    status: int = 500
    body: str = ""
    seconds: float = 0.0
    dims: int = 0
    size: int = 0


@dataclass
class Seen:
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class EmbeddingsEndpoint:
    faults: deque[Fault] = field(default_factory=deque)
    seen: list[Seen] = field(default_factory=list)
    chunked: bool = False  # answer with Transfer-Encoding: chunked, as Go's servers do for large bodies
    refuses_dimensions: bool = False  # 400 to a request with `dimensions`, as vLLM does for most models
    tls: ssl.SSLContext | None = None  # serve https with this server context

    def __post_init__(self) -> None:
        self._closing = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                endpoint._answer(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if self.tls is not None:
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> EmbeddingsEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length", "0")))
        request = json.loads(raw)
        self.seen.append(Seen({k.lower(): v for k, v in handler.headers.items()}, request))
        if handler.path != "/v1/embeddings":
            return self._send(handler, 404, b'{"error":"no such route"}')
        if self.refuses_dimensions and "dimensions" in request:
            return self._send(handler, 400, b'{"object":"error","message":"Model \\"m\\" does not support '
                                            b'matryoshka representation, changing output dimensions will lead to '
                                            b'poor results.","type":"BadRequestError","code":400}')
        fault = self.faults.popleft() if self.faults else None
        kind = fault.kind if fault else ""
        if fault and kind == "sleep":
            self._closing.wait(fault.seconds)
        if fault and kind == "status":
            return self._send(handler, fault.status, fault.body.encode())
        if kind == "drop":
            handler.close_connection = True
            handler.connection.shutdown(2)
            return None
        if fault and kind == "replace":
            return self._send(handler, 200, fault.body.encode())
        if fault and kind == "raw":
            handler.close_connection = True
            handler.wfile.write(fault.body.encode())
            return None
        if kind == "endless_headers":
            handler.close_connection = True
            handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
            line = b"X-Padding: " + b"a" * 1000 + b"\r\n"
            try:
                for _ in range(256 * 1024):  # 256 MB at most: the client must hang up long before
                    handler.wfile.write(line)
            except OSError:
                pass
            return None
        if kind == "echo":
            shown = sorted(handler.headers.items(), key=lambda kv: kv[0].lower() != "authorization")
            echoed = "".join(f"{k}: {v}\n" for k, v in shown)
            return self._send(handler, 200, f"<html><pre>{echoed}</pre></html>".encode())
        if kind == "garbage":
            return self._send(handler, 200, b"<html>gateway hiccup</html>")
        if fault and kind == "huge_declared":
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(fault.size))
            handler.end_headers()
            handler.wfile.write(b"[" * 1024)
            return None
        if fault and kind == "huge_chunked":
            handler.send_response(200)
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            piece = b"[" * 65536
            try:
                for _ in range(fault.size // len(piece) + 1):
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                handler.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass  # the client hung up once it had read enough: what it should do
            return None
        texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
        rows = builtin().embed_now(texts).tolist()
        if fault and kind == "dims":
            rows = [r[:fault.dims] for r in rows]
        if kind == "nan" and rows:
            rows[-1][3] = float("nan")
        data = [{"object": "embedding", "index": i, "embedding": r} for i, r in enumerate(rows)]
        if kind == "shuffle":
            data.reverse()
        if kind == "fewer":
            data = data[:-1]
        answer = {"object": "list", "data": data, "model": request.get("model")}
        self._send(handler, 200, json.dumps(answer).encode())  # NaN goes out as `NaN`, as some servers send it
        return None

    def _send(self, handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        if self.chunked:
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            for i in range(0, len(body), 1000):
                part = body[i:i + 1000]
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            handler.wfile.write(b"0\r\n\r\n")
        else:
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
