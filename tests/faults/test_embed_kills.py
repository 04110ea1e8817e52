"""Workers killed in the middle of an embed job (SPEC §3): the claim they held runs out and is taken
over, and embedding goes on to the end, on both stores. Each kill lands while the job waits on the
embedder (a real endpoint on loopback made to hang), so it has claimed its windows and stored
nothing of the batch."""

from __future__ import annotations

import asyncio

from sessionsearch.protocol import AppendParams, SearchParams

from ..embed.endpoint import EmbeddingsEndpoint, Fault
from ..helpers import chain, engine_at, until
from ..reconcile.test_pipeline import DEADLINE_S, Worker

SESSIONS = 3
MESSAGES = 40  # a session: one window, one batch


def _embedder_env(url: str) -> dict[str, str]:
    return {"SESSIONSEARCH_EMBEDDER": "openai", "SESSIONSEARCH_EMBEDDER_URL": url,
            "SESSIONSEARCH_EMBEDDER_MODEL": "nomic-embed-text", "SESSIONSEARCH_EMBEDDER_DIMENSIONS": "256",
            "SESSIONSEARCH_EMBEDDER_ATTEMPTS": "1", "SESSIONSEARCH_CLAIM_LEASE_S": "1"}


async def test_embedding_resumes_after_workers_are_killed_mid_job_and_one_restarts(backend, redis_url, tmp_path):
    with EmbeddingsEndpoint() as endpoint:
        env = {**backend.env(), **_embedder_env(endpoint.url)}
        settings = {"embedder": "openai", "embedder_url": endpoint.url, "embedder_model": "nomic-embed-text",
                    "embedder_dimensions": 256, "redis_url": redis_url}
        async with engine_at(backend, **settings) as engine:
            for s in range(SESSIONS):
                texts = [("user" if i % 2 == 0 else "assistant", f"session {s} message {i} about harbor walls")
                         for i in range(MESSAGES)]
                await engine.append(AppendParams(sessionKey=f"agent:main:s{s}", events=chain(f"s{s}m", texts)))

            async def waiting() -> int:
                agent = (await engine.index_status())["agents"][0]
                return int(agent["embeddingBacklog"])

            assert await waiting() == SESSIONS * MESSAGES
            for kill in range(2):
                endpoint.faults.append(Fault("sleep", seconds=120))  # the next request hangs: a job mid-batch
                await _kill_mid_request(endpoint, Worker(backend.data_dir, redis_url, tmp_path / f"kill{kill}.log",
                                                         **env))
            endpoint.faults.clear()
            left = await waiting()
            assert left > 0  # the kills left work, claimed by jobs that died
            final = Worker(backend.data_dir, redis_url, tmp_path / "final.log", **env)
            try:
                last: dict[str, int] = {}

                async def drained() -> bool:
                    last["waiting"] = await waiting()
                    return last["waiting"] == 0

                await until(drained, DEADLINE_S,
                            lambda: f"embedding to finish ({last}): {final.log_path.read_text()[-3000:]}", every=0.2)
            finally:
                assert final.stop() == 0
            agent = (await engine.index_status())["agents"][0]
            assert agent["embeddedMessages"] == SESSIONS * MESSAGES
            found = await engine.search(SearchParams(query="harbor walls of session 2", mode="semantic"))
            assert found["results"] and "indexing" not in found


async def _kill_mid_request(endpoint: EmbeddingsEndpoint, worker: Worker) -> None:
    """SIGKILL the worker once its embed job has sent a request the endpoint holds unanswered."""
    asked = len(endpoint.seen)
    try:
        await until(lambda: len(endpoint.seen) > asked, DEADLINE_S,
                    lambda: f"an embed request: {worker.log_path.read_text()[-2000:]}")
        await asyncio.sleep(0.2)  # past the request, inside the wait on its answer
    finally:
        worker.kill()
