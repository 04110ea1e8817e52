"""The OpenAPI document against the server it describes: schemathesis with all its checks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import pytest

from sessionsearch.api.edge import OPEN_PATHS
from sessionsearch.api.openapi import openapi_document

from ..helpers import chain
from ..server import Server

TOKEN = "schemathesis-token"


def _schemathesis(tmp_path, token: str | None, examples: int, *options: str) -> None:
    """Run schemathesis with every check against a real server (with `token` configured, if any)."""
    env_token = {"SESSIONSEARCH_API_TOKEN": token} if token else {}
    server = Server(tmp_path / "data", tmp_path / "server.log", **env_token)
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        # a store with something to find, list, read and archive, in two agents
        for key, words in (("agent:main:main", "0 a"), ("agent:ops:main", "deploy 0"), ("0", "zero")):
            assert server.post("transcript.append", {"sessionKey": key, "events": chain("m", [("user", words)])},
                               headers=auth)[0] == 200
        upsert = {"sessionKey": "0", "label": "0", "kind": "direct"}
        assert server.post("sessions.upsert", upsert, headers=auth)[0] == 200
        cli = Path(sys.executable).parent / "schemathesis"
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks",
               "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        headers = ["-H", f"Authorization: Bearer {token}"] if token else []
        run = subprocess.run([str(cli), "run", f"{server.url}/openapi.json", "--checks", "all", *headers,
                              "--max-examples", str(examples), "--seed", "20261130", "--continue-on-failure",
                              *options],
                             capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
        summary = re.search(r"(\d+) generated", run.stdout)
        print(f"schemathesis: {summary.group(0) if summary else run.stdout[-300:]}")
        assert run.returncode == 0, run.stdout[-8000:]
        log = server.log_path.read_text()
        assert "api.failed" not in log and "api.crashed" not in log
    finally:
        assert server.stop() == 0


def test_schemathesis_with_every_check_finds_the_server_and_its_document_in_agreement(tmp_path):
    """Valid requests accepted, invalid ones refused, every answer documented, the token enforced, no 5xx."""
    # 40 examples per operation and phase keep the run near a minute on a busy 2-core machine
    _schemathesis(tmp_path, TOKEN, 40)


def test_schemathesis_agrees_with_a_server_that_takes_no_token(tmp_path):
    """Its document lists the bearer scheme as optional: requests without one are answered, none 401."""
    # The document differs from the one above only in its security requirement: fewer examples check
    # that, and the acceptance of valid bodies is left to the run above. A valid body can be refused
    # for what is stored, which no schema says (a sessionId that is not a window of the key, once
    # the fuzzer has appended to that key); which such bodies a run meets depends on its examples.
    _schemathesis(tmp_path, None, 15, "--exclude-checks", "positive_data_acceptance")


def _operations(document: dict) -> list[tuple[str, str, dict]]:
    return [(path, verb, op) for path, ops in document["paths"].items() for verb, op in ops.items()]


def test_the_document_names_the_bearer_scheme_and_a_401_on_every_operation_but_the_health_probes():
    for token in (True, False):
        document = openapi_document(token=token)
        assert document["components"]["securitySchemes"]["bearer"] == {
            **document["components"]["securitySchemes"]["bearer"], "type": "http", "scheme": "bearer"}
        # required where the server has a token; optional (an empty requirement beside it) where it takes none
        assert document["security"] == ([{"bearer": []}] if token else [{"bearer": []}, {}])
        for path, _verb, op in _operations(document):
            if path in OPEN_PATHS:
                assert op["security"] == [] and "401" not in op["responses"], path
            else:
                assert "security" not in op, path  # the document's requirement holds
                code = op["responses"]["401"]["content"]["application/json"]["schema"]
                assert code["properties"]["error"]["properties"]["code"] == {"const": "UNAUTHORIZED"}, path


def test_every_protected_operation_without_the_token_answers_the_documented_401(tmp_path):
    server = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_API_TOKEN=TOKEN)
    try:
        status, served = server.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and served["security"] == [{"bearer": []}]
        checked = 0
        for path, verb, op in _operations(served):
            if path in OPEN_PATHS:
                continue
            request = urllib.request.Request(server.url + path, method=verb.upper(),
                                             data=b"{}" if verb == "post" else None)
            with pytest.raises(urllib.error.HTTPError) as answer:
                urllib.request.urlopen(request, timeout=30)
            assert answer.value.code == 401, path
            assert answer.value.headers["WWW-Authenticate"] == "Bearer"
            documented = op["responses"]["401"]["content"]["application/json"]["schema"]
            jsonschema.validate(json.loads(answer.value.read()), documented)
            checked += 1
        assert checked == len(served["paths"]) - len(OPEN_PATHS)
    finally:
        assert server.stop() == 0


def test_a_server_without_a_token_serves_the_scheme_as_optional(tmp_path):
    server = Server(tmp_path / "data", tmp_path / "server.log")
    try:
        status, served = server.get("/openapi.json")
        assert status == 200 and served["security"] == [{"bearer": []}, {}]
        assert served["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    finally:
        assert server.stop() == 0
