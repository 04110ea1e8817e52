"""open_agents_max: SQLite keeps at most that many agent databases open (least recently used closed
first), so a search of every agent holds open files by the setting, not by the agent count, and
answers exactly as with every database open."""

from __future__ import annotations

import os

from ..helpers import BASE_TS, engine_at, timed

AGENTS = [f"b{i:02d}" for i in range(20)]
BOUND = 5
PER_AGENT = 10  # open files an open agent may hold (8 with one reader) and room for a second reader


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _fill(engine) -> None:
    ts = BASE_TS
    for n, agent in enumerate(AGENTS):
        items = []
        for i in range(6):
            ts += 1000
            items.append(("user" if i % 2 else "assistant", f"harbor {'beacon ' * (1 + (n + i) % 3)}note {agent}", ts))
        await engine.append(f"agent:{agent}:main", timed(f"{agent}m", items))


async def _answers(engine) -> list:
    out = []
    for query, match, order in [("beacon", "exact", "relevance"), ("harbor note", "exact", "relevance"),
                                ("bea", "prefix", "relevance"), ("beacon", "exact", "recent")]:
        for mode in ("messages", "sessions"):
            out.append(await engine.search(query=query, match=match, order=order, limit=25, resultMode=mode))
    return out


async def test_a_bounded_store_answers_as_an_unbounded_one_within_its_open_files(tmp_path):
    # SQLite only: a database per agent is what holds files per agent (PostgreSQL shares a pool)
    async with engine_at(tmp_path) as engine:
        await _fill(engine)
    base = _open_files()
    async with engine_at(tmp_path) as engine:  # every store open
        unbounded = await _answers(engine)
        every_open = _open_files() - base
    limit = BOUND * PER_AGENT + 8
    assert every_open > limit  # what the bound must cut: 20 agents' files
    async with engine_at(tmp_path, open_agents_max=BOUND) as engine:
        assert _open_files() - base <= limit
        assert await _answers(engine) == unbounded
        assert _open_files() - base <= limit
        # a write to a released store opens it again, and is searchable at once
        await engine.append(f"agent:{AGENTS[0]}:late", timed("late", [("user", "beacon lighthouse", BASE_TS)]))
        found = await engine.search(query="lighthouse", match="exact", limit=5)
        assert [h["messageId"] for h in found["results"]] == ["late1"]
        await _answers(engine)
        assert _open_files() - base <= limit
