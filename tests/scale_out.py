"""The scale-out shape, brought up for real: web processes and workers sharing one PostgreSQL
database and one Redis. tests/ops/test_scale_out.py drives it; it reads the store's tables only to
compare the index with a full rebuild."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg

BASE_TS = 1767323045000
BIG_ROWS = 5_000  # one window large enough to be reconciled in many batches (a worker dies mid-way)
AGENTS = {"main": 8, "work": 5, "ops-2": 3}  # small sessions per agent, besides main's big one


def text_of(agent: str, session: int, i: int) -> str:
    return f"{agent} s{session} row {i} topic{i % 31} shared words everywhere"


def write_state_dir(root: Path) -> dict[str, set[str]]:
    """A multi-agent gateway state dir; every other small session rewinds once (its survivors are
    what reconciliation must index). Returns the message ids each session key should have indexed."""
    expected: dict[str, set[str]] = {}
    for agent, count in AGENTS.items():
        folder = root / "agents" / agent / "sessions"
        folder.mkdir(parents=True)
        index = {}
        sizes = ([BIG_ROWS] if agent == "main" else []) + [20 + 7 * n for n in range(count)]
        for n, size in enumerate(sizes):
            sid, key = f"{agent}-w{n}", f"agent:{agent}:s{n}"
            events, parent, on_branch = [], None, []
            for i in range(size):
                mid = f"{agent}-{n}-m{i}"
                events.append({"type": "message", "id": mid, "parentId": parent,
                               "message": {"role": "user" if i % 2 == 0 else "assistant",
                                           "content": text_of(agent, n, i), "timestamp": BASE_TS + i}})
                on_branch.append(mid)
                parent = mid
                if n % 2 == 1 and i == size // 2:  # rewind to the first third, continue from there
                    target = size // 3
                    events.append({"type": "leaf", "id": f"{agent}-{n}-l", "parentId": parent,
                                   "targetId": f"{agent}-{n}-m{target}"})
                    parent = f"{agent}-{n}-l"
                    del on_branch[target + 1:]
            (folder / f"{sid}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
            index[key] = {"sessionId": sid, "label": f"{agent} session {n}"}
            expected[key] = set(on_branch)
        (folder / "sessions.json").write_text(json.dumps(index))
    return expected


def cli(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    environment.update(env)
    run = subprocess.run([sys.executable, "-m", "sessionsearch.cli", *args], env=environment, capture_output=True,
                         text=True, timeout=timeout)
    if run.returncode != 0:
        raise AssertionError(f"sessionsearch {' '.join(args)} failed: {run.stdout[-2000:]}{run.stderr[-2000:]}")
    return run


def index_snapshot(url: str) -> tuple[list[tuple], list[tuple]]:
    """Every index row (agent, session key, message id, ts, length, term counts, lexemes) and every
    window's index statistics, in a stable order."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT a.agent_id, w.session_key, i.mid, i.ts, i.dl, i.tf::text, i.tsv::text FROM ss_index i "
            "JOIN ss_windows w ON w.wid = i.wid JOIN ss_agents a ON a.ano = i.ano ORDER BY i.id").fetchall()
        windows = conn.execute("SELECT wid, needs_rebuild, claim_token, idx_rows, idx_tokens FROM ss_windows "
                               "ORDER BY wid").fetchall()
    return rows, windows


def mark_everything_for_rebuild(url: str) -> None:
    """What a non-linear write does to a window, to every window: the next reconcile rebuilds all."""
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE ss_windows SET needs_rebuild = 1, rebuild_gen = rebuild_gen + 1 WHERE cold = 0")


def window_state(url: str, session_id: str) -> tuple[int, int, str | None]:
    """(wid, needs_rebuild, claim token) of a window."""
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT wid, needs_rebuild, claim_token FROM ss_windows WHERE session_id = %s",
                            (session_id,)).fetchone()
