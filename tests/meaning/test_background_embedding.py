"""The embedded shape embeds in the background (SPEC §3): rows appended over HTTP, and rows an
import leaves for the in-process worker, get their embeddings without a meaning search meeting
them first, so the first semantic search on an agent already answers."""

from __future__ import annotations

from pathlib import Path

from sessionsearch import Engine, Settings
from sessionsearch.importer import run_import

from ..helpers import chain, wait_until
from ..server import Server

DEMO = Path(__file__).resolve().parents[2] / "sessionsearch" / "demo_data"
TALK = [("user", "We agreed to take the mortgage with the fixed rate for twenty years."),
        ("assistant", "Noted: the dentist appointment moved to Thursday morning."),
        ("user", "The movers come on the first of March to take the piano.")]


def _waiting(server: Server) -> dict[str, int]:
    status, body = server.post("index.status")
    assert status == 200, body
    return {a["agentId"]: a["embeddingBacklog"] for a in body["agents"]}


def _settled(server: Server) -> dict[str, int] | None:
    waiting = _waiting(server)
    return waiting if waiting and not any(waiting.values()) else None


def test_messages_appended_to_an_embedded_server_are_embedded_without_a_search(server):
    for n, agent in enumerate(("main", "work")):
        status, body = server.post("transcript.append", {"sessionKey": f"agent:{agent}:chat",
                                                        "events": chain(f"m{n}-", TALK)})
        assert status == 200, body
    wait_until(lambda: _settled(server), 60, lambda: f"the backlog to be embedded: {_waiting(server)}")
    # the first meaning search already answers, over every message
    status, found = server.post("sessions.search", {"query": "who carries the piano", "mode": "semantic",
                                                    "limit": 25})
    assert status == 200 and "indexing" not in found, found
    assert {"m0-3", "m1-3"} <= {h["messageId"] for h in found["results"]}


async def test_an_import_is_embedded_by_the_server_that_reconciles_it_without_a_search(tmp_path):
    async with Engine(settings=Settings(data_dir=str(tmp_path / "data"), embedder="none")) as engine:
        report = await run_import(engine, DEMO)  # left for the server to reconcile and embed
        assert report.problems == []
    srv = Server(tmp_path / "data", tmp_path / "server.log")
    try:
        waiting = wait_until(lambda: _settled(srv), 90, lambda: f"the import to be embedded: {_waiting(srv)}")
        assert set(waiting) >= {"main", "work_bot"}
        status, body = srv.post("index.status")
        assert all(a["backlog"] == 0 and a["embeddedMessages"] > 0 for a in body["agents"]), body
    finally:
        assert srv.stop() == 0
