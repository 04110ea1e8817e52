"""The OpenAPI document against the server it describes: schemathesis with all its checks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from ..helpers import chain
from ..server import Server

TOKEN = "schemathesis-token"


def test_schemathesis_with_every_check_finds_the_server_and_its_document_in_agreement(tmp_path):
    """Valid requests accepted, invalid ones refused, every answer documented, the token enforced, no 5xx."""
    server = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_API_TOKEN=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        # a store with something to find, list, read and archive, in two agents
        for key, words in (("agent:main:main", "0 a"), ("agent:ops:main", "deploy 0"), ("0", "zero")):
            assert server.post("transcript.append", {"sessionKey": key, "events": chain("m", [("user", words)])},
                               headers=auth)[0] == 200
        upsert = {"sessionKey": "0", "label": "0", "kind": "direct"}
        assert server.post("sessions.upsert", upsert, headers=auth)[0] == 200
        cli = Path(sys.executable).parent / "schemathesis"
        # 40 examples per operation and phase keep the run near a minute on a busy 2-core machine
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks",
               "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        run = subprocess.run([str(cli), "run", f"{server.url}/openapi.json", "--checks", "all",
                              "-H", f"Authorization: Bearer {TOKEN}", "--max-examples", "40",
                              "--seed", "20261130", "--continue-on-failure"],
                             capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
        summary = re.search(r"(\d+) generated", run.stdout)
        print(f"schemathesis: {summary.group(0) if summary else run.stdout[-300:]}")
        assert run.returncode == 0, run.stdout[-8000:]
        log = server.log_path.read_text()
        assert "api.failed" not in log and "api.crashed" not in log
    finally:
        assert server.stop() == 0
