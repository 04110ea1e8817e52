"""A real `sessionsearch serve` process on loopback, and a small HTTP client for the tests."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .helpers import wait_until
from .services import free_port, terminate


class Server:
    def __init__(self, data_dir: Path, log_path: Path, *args: str, preexec_fn: Callable[[], None] | None = None,
                 **env: str) -> None:
        """`preexec_fn`: run in the child before `serve` starts (a resource limit, say)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "w")
        environment = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
        environment.update(SESSIONSEARCH_DATA_DIR=str(data_dir), SESSIONSEARCH_PORT=str(self.port), **env)
        self.proc = subprocess.Popen([sys.executable, "-m", "sessionsearch.cli", "serve", *args], env=environment,
                                     stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn)

        def healthy() -> bool:
            try:
                if self.get("/healthz")[0] == 200:
                    return True
            except OSError:
                pass
            assert self.proc.poll() is None, f"server did not start: {log_path.read_text()[-3000:]}"
            return False

        wait_until(healthy, 60, lambda: f"the server to start: {log_path.read_text()[-3000:]}")

    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                status, payload, ctype = resp.status, resp.read(), resp.headers.get("content-type", "")
        except urllib.error.HTTPError as err:
            status, payload, ctype = err.code, err.read(), err.headers.get("content-type", "")
        except http.client.IncompleteRead as exc:  # the server died mid-answer: a lost connection
            raise ConnectionError(f"{method} {path}: the answer was cut off") from exc
        return status, (json.loads(payload) if "json" in ctype else payload.decode())

    def post(self, method: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.request("POST", f"/v1/{method}", body if body is not None else {}, **kw)

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.request("GET", path, **kw)

    def ready_when(self, status: int, within: float = 60) -> dict:
        """/readyz's body once it answers `status`: it answers the latest background check
        (api/readiness.py), so it tells a change a second or so after it happened."""
        def answered() -> dict | None:
            got, body = self.get("/readyz")
            return body if got == status else None

        return wait_until(answered, within, f"/readyz to answer {status}", every=0.05)

    def stop(self) -> int:
        return terminate(self.proc, self.log)
