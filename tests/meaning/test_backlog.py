"""What waits for the meaning index is work an embed job will do: an incognito session's messages
are never embedded, so they are neither embedded nor waiting on any door (index.status, the
metric, the CLI, the demo's progress line), and the sweep sends no embed job for their window.
Both stores; the embed jobs run in the test's process (Engine.embed_pending, Engine.embed)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from dramatiq import Message
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sessionsearch.api.server import embedding_progress
from sessionsearch.embed.builtin import BuiltinEmbedder
from sessionsearch.engine import Engine
from sessionsearch.importer import run_import
from sessionsearch.metrics import PipelineCollector
from sessionsearch.protocol import AppendParams, SessionRef, UpsertParams

from ..helpers import chain, engine_at, sql_rows, sweeping, wait_until
from ..ops.test_cli import _cli
from ..server import Server
from .test_semantic_search import TOPICS

KEPT, SECRET, COLD = "agent:main:kept", "agent:main:secret", "agent:main:cold"
SECRET_TEXT = [("user", "The surprise party for Dana is on Saturday at the lake house"),
               ("assistant", "I will order the cake and keep it quiet")]
DEMO = Path(__file__).resolve().parents[2] / "sessionsearch" / "demo_data"


class Recording:
    """The builtin embedder, noting every text it is given."""

    def __init__(self) -> None:
        self.inner = BuiltinEmbedder.load()
        self.model, self.dimensions, self.min_score = self.inner.model, self.inner.dimensions, self.inner.min_score
        self.least_score, self.keyword_weight = self.inner.least_score, self.inner.keyword_weight
        self.batch_rows = self.inner.batch_rows
        self.texts: list[str] = []

    async def embed(self, texts):
        self.texts += texts
        return await self.inner.embed(texts)

    async def embed_query(self, text):
        self.texts.append(text)
        return await self.inner.embed_query(text)

    async def aclose(self) -> None:
        return None


async def _kept_and_secret(engine: Engine) -> None:
    """An ordinary session of three messages beside an incognito one of two; the incognito flag
    comes first, as an import of sessions.json sets it."""
    await engine.upsert_session(UpsertParams(sessionKey=SECRET, incognito=True))
    await engine.append(AppendParams(sessionKey=SECRET, events=chain("s", SECRET_TEXT)))
    await engine.append(AppendParams(sessionKey=KEPT, events=chain("k", TOPICS[:3])))


def _sent(queue) -> list[tuple]:
    """The (agent, wid) of the embed jobs waiting in a stub broker's queue, taken out of it."""
    out = []
    while queue.qsize():
        out.append(tuple(Message.decode(queue.get_nowait()).args))
    return out


async def _wid(engine: Engine, key: str) -> int:
    store = await engine.store("main")
    (wid,), = await sql_rows(store, "SELECT wid FROM windows WHERE session_key = ?",
                             "SELECT wid FROM ss_windows WHERE session_key = %s", (key,))
    return int(wid)


def _scraped(engine: Engine, *, embedding: bool = True) -> dict[str, float]:
    """The pipeline gauges of agent main as a scrape reads them, by name (unit label appended)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector(engine.backend.agent_status, embedding=embedding))
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.labels.get("agent") == "main":
                out[sample.name + "".join(f"/{v}" for k, v in sorted(sample.labels.items()) if k != "agent")] = \
                    sample.value
    return out


async def test_incognito_messages_are_neither_embedded_nor_waiting_once_the_rest_is_embedded(backend):
    embedder = Recording()
    async with Engine(settings=backend.settings(), embedder=embedder) as engine:
        await _kept_and_secret(engine)
        before = (await engine.index_status())["agents"][0]
        assert (before["embeddedMessages"], before["embeddingBacklog"]) == (0, 3)  # the kept session's
        assert _scraped(engine)["sessionsearch_embedding_backlog"] == 1
        assert await engine.embed_pending() == {"embedded": 1}  # no job even tried the incognito window
        status = (await engine.index_status())["agents"][0]
        assert (status["embeddedMessages"], status["embeddingBacklog"]) == (3, 0)
        assert status["completeness"] == 1.0 and status["messages"] == status["indexedMessages"] == 5
        assert embedding_progress(await engine.index_status()) == (3, 3)
        assert _scraped(engine)["sessionsearch_embedding_backlog"] == 0
        # the rule stands: the incognito text went to no embedder and has no embedding
        assert sorted(embedder.texts) == sorted(text for _, text in TOPICS[:3])
        store = await engine.store("main")
        assert await sql_rows(store, "SELECT count(*) FROM embeddings", "SELECT count(*) FROM ss_embeddings") == [(3,)]


async def test_an_embed_job_sent_for_an_incognito_window_is_a_no_op_that_leaves_nothing_waiting(backend):
    async with engine_at(backend) as engine:
        await _kept_and_secret(engine)
        await engine.embed_pending()
        result = await engine.embed("main", await _wid(engine, SECRET))
        assert (result.outcome, result.rows) == ("incognito", 0)
        status = (await engine.index_status())["agents"][0]
        assert (status["embeddedMessages"], status["embeddingBacklog"]) == (3, 0)
        assert _scraped(engine)["sessionsearch_embedding_backlog"] == 0
        assert await engine.embed_backlog() == {"main": set()}


async def test_the_sweep_sends_no_embed_job_for_an_incognito_window(backend):
    settings = backend.settings()
    async with sweeping(settings) as (pipeline, sweeper):
        queue = pipeline.broker.queues["embed"]
        async with engine_at(backend) as engine:
            await _kept_and_secret(engine)
            kept = await _wid(engine, KEPT)
            # a store no embed job has touched yet: every warm window waits, but an incognito one
            assert (await sweeper.startup())["embedWindows"] == 1
            assert _sent(queue) == [("main", kept)]
            assert (await engine.embed("main", kept)).outcome == "embedded"
            pipeline.reconciler.embed_markers.release([("main", kept)])  # as the job's end does
            for _ in range(2):  # a worker's periodic sweeps, one after the other
                assert (await sweeper.periodic())["embedWindows"] == 0
                assert queue.qsize() == 0
            assert (await sweeper.startup())["embedWindows"] == 0 and queue.qsize() == 0


async def test_a_session_made_ordinary_again_waits_and_its_window_is_sent(backend):
    settings = backend.settings()
    async with sweeping(settings) as (pipeline, sweeper):
        async with engine_at(backend) as engine:
            await _kept_and_secret(engine)
            await engine.embed_pending()
            await engine.upsert_session(UpsertParams(sessionKey=SECRET, incognito=False))
            assert (await engine.index_status())["agents"][0]["embeddingBacklog"] == 2
            assert _scraped(engine)["sessionsearch_embedding_backlog"] == 1
            assert (await sweeper.periodic())["embedWindows"] == 1
            assert _sent(pipeline.broker.queues["embed"]) == [("main", await _wid(engine, SECRET))]
            assert await engine.embed_pending() == {"embedded": 1}
            status = (await engine.index_status())["agents"][0]
            assert (status["embeddedMessages"], status["embeddingBacklog"]) == (5, 0)


async def test_a_session_made_incognito_after_it_was_embedded_counts_neither_way(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=SECRET, events=chain("s", SECRET_TEXT)))
        await engine.append(AppendParams(sessionKey=KEPT, events=chain("k", TOPICS[:3])))
        await engine.embed_pending()
        await engine.upsert_session(UpsertParams(sessionKey=SECRET, incognito=True))
        status = (await engine.index_status())["agents"][0]
        assert (status["embeddedMessages"], status["embeddingBacklog"]) == (3, 0)


async def test_an_archived_window_never_embedded_is_not_waiting(backend):
    settings = backend.settings()
    async with sweeping(settings) as (pipeline, sweeper):
        async with engine_at(backend) as engine:
            await engine.append(AppendParams(sessionKey=KEPT, events=chain("k", TOPICS[:3])))
            await engine.embed_pending()
            await engine.append(AppendParams(sessionKey=COLD, events=chain("c", TOPICS[3:5])))
            await engine.archive(SessionRef(sessionKey=COLD))  # before any job embedded it: its rows left the index
            assert (await engine.index_status())["agents"][0]["embeddingBacklog"] == 0
            assert _scraped(engine)["sessionsearch_embedding_backlog"] == 0
            assert (await sweeper.periodic())["embedWindows"] == 0
            assert pipeline.broker.queues["embed"].qsize() == 0


async def test_with_no_embedder_the_metric_shows_nothing_waiting(backend):
    async with engine_at(backend, embedder="none") as engine:
        await engine.append(AppendParams(sessionKey=KEPT, events=chain("k", TOPICS[:3])))
        assert _scraped(engine)["sessionsearch_embedding_backlog"] == 1  # an embedder would take it
        assert _scraped(engine, embedding=False)["sessionsearch_embedding_backlog"] == 0
        status = (await engine.index_status())["agents"][0]
        assert (status["embeddedMessages"], status["embeddingBacklog"]) == (0, 0)


async def test_the_demos_progress_line_reaches_its_total(backend):
    """The demo's sample holds an incognito session: its messages are not in the total."""
    async with engine_at(backend) as engine:
        await run_import(engine, DEMO)
        await engine.reconcile_pending()
        done, total = embedding_progress(await engine.index_status())
        assert done == 0 and total > 0
        await engine.embed_pending()
        assert embedding_progress(await engine.index_status()) == (total, total)
        every = sum(a["messages"] for a in (await engine.index_status())["agents"])
        assert total < every  # the incognito session's messages are indexed (searched by nobody) but never embedded


def _gauge(exposition: str, name: str) -> float:
    return next(s.value for f in text_string_to_metric_families(exposition) for s in f.samples
                if s.name == name and s.labels.get("agent") == "main")


def test_every_door_of_a_running_service_reaches_zero_waiting_beside_an_incognito_session(server):
    """index.status over HTTP, the Control UI's status, and /metrics, on `serve` with its in-process
    worker: a search by meaning sends the ordinary session's embed job; the incognito one waits for nothing."""
    assert server.post("sessions.upsert", {"sessionKey": SECRET, "incognito": True})[0] == 200
    for key, prefix, turns in ((SECRET, "s", SECRET_TEXT), (KEPT, "k", TOPICS[:3])):
        assert server.post("transcript.append", {"sessionKey": key, "events": chain(prefix, turns)})[0] == 200

    def embedded() -> dict | None:
        server.post("sessions.search", {"query": "home loan", "mode": "hybrid"})  # sends what its scope waits for
        agent = server.post("index.status", {})[1]["agents"][0]
        return agent if agent["embeddingBacklog"] == 0 else None

    agent = wait_until(embedded, 60, "the kept session to be embedded and nothing left waiting", every=0.1)
    assert (agent["embeddedMessages"], agent["messages"], agent["completeness"]) == (3, 5, 1.0)
    ui = server.get("/ui/status.json")[1]["agents"][0]
    assert (ui["embeddedMessages"], ui["embeddingBacklog"]) == (3, 0)
    assert _gauge(server.get("/metrics")[1], "sessionsearch_embedding_backlog") == 0
    found = server.post("sessions.search", {"query": "a party with cake", "mode": "semantic", "limit": 25})[1]
    assert "indexing" not in found and all(h["sessionKey"] == KEPT for h in found["results"])


def test_with_no_embedder_a_running_service_shows_nothing_waiting(tmp_path):
    srv = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_EMBEDDER="none")
    try:
        assert srv.post("transcript.append", {"sessionKey": KEPT, "events": chain("k", TOPICS[:3])})[0] == 200
        assert _gauge(srv.get("/metrics")[1], "sessionsearch_embedding_backlog") == 0
        assert srv.post("index.status", {})[1]["agents"][0]["embeddingBacklog"] == 0
    finally:
        assert srv.stop() == 0


def test_the_cli_status_shows_nothing_to_embed_beside_an_incognito_session(tmp_path):
    async def seed() -> None:
        async with engine_at(tmp_path) as engine:
            await _kept_and_secret(engine)
            await engine.embed_pending()

    asyncio.run(seed())
    machine = json.loads(_cli("status", "--json", data_dir=tmp_path).stdout)["agents"][0]
    assert (machine["embeddedMessages"], machine["embeddingBacklog"], machine["completeness"]) == (3, 0, 1.0)
    row = _cli("status", data_dir=tmp_path).stdout.splitlines()[1]
    assert row.split()[0] == "main" and row.split()[-2:] == ["3", "0"]  # embedded, to embed
