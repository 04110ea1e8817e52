"""open_agents_max: SQLite keeps at most that many agent databases open (least recently used closed
first), so a search of every agent holds open files by the setting, not by the agent count, and
answers exactly as with every database open."""

from __future__ import annotations

import itertools
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from sessionsearch import OutOfFiles
from sessionsearch.limits import derive, files_per_agent, raise_file_limit
from sessionsearch.protocol import AppendParams, HistoryParams, SearchParams

from ..helpers import BASE_TS, engine_at, timed

AGENTS = [f"b{i:02d}" for i in range(20)]
BOUND = 5
PER_AGENT = 9  # open files an open agent may hold (7 with one reader) and room for a second reader


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _fill(engine) -> None:
    ts = BASE_TS
    for n, agent in enumerate(AGENTS):
        items = []
        for i in range(6):
            ts += 1000
            items.append(("user" if i % 2 else "assistant", f"harbor {'beacon ' * (1 + (n + i) % 3)}note {agent}", ts))
        await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"{agent}m", items)))


async def _answers(engine) -> list:
    out = []
    for query, match, order in [("beacon", "exact", "relevance"), ("harbor note", "exact", "relevance"),
                                ("bea", "prefix", "relevance"), ("beacon", "exact", "recent")]:
        for mode in ("messages", "sessions"):
            out.append(await engine.search(SearchParams(query=query, match=match, order=order, limit=25, resultMode=mode)))
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
        await engine.append(AppendParams(sessionKey=f"agent:{AGENTS[0]}:late", events=timed("late", [("user", "beacon lighthouse", BASE_TS)])))
        found = await engine.search(SearchParams(query="lighthouse", match="exact", limit=5))
        assert [h["messageId"] for h in found["results"]] == ["late1"]
        await _answers(engine)
        assert _open_files() - base <= limit


@contextmanager
def _files_left(room: int) -> Iterator[None]:
    """The process's soft open-file limit set so that only `room` more files open (EMFILE past
    them), and put back after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # an open takes the lowest free descriptor: a limit at the (room + 1)-th free number leaves
    # exactly `room`, whatever holes closed files left below the highest (fstat opens nothing)
    resource.setrlimit(resource.RLIMIT_NOFILE, (_free_descriptor(room), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _free_descriptor(nth: int) -> int:
    """The number of this process's `nth` free file descriptor (0: the lowest)."""
    for fd in itertools.count():
        try:
            os.fstat(fd)
        except OSError:
            if nth == 0:
                return fd
            nth -= 1


async def test_an_open_that_finds_no_file_left_closes_the_idle_stores_and_succeeds(tmp_path):
    async with engine_at(tmp_path) as engine:
        await _fill(engine)  # 20 stores open, each with its writer's files
        assert len(engine.backend.budget) == len(AGENTS)
        with _files_left(2):  # a new agent's database needs more: only the idle stores' files can make room
            await engine.append(AppendParams(sessionKey="agent:late:main", events=timed("late", [("user", "beacon lighthouse", BASE_TS)])))
            assert len(engine.backend.budget) < len(AGENTS)
            found = await engine.search(SearchParams(query="lighthouse", match="exact", limit=5))
        assert [h["messageId"] for h in found["results"]] == ["late1"]


async def test_an_open_that_finds_no_file_left_and_nothing_idle_answers_unavailable_and_recovers(tmp_path):
    async with engine_at(tmp_path) as engine:
        await _fill(engine)
    async with engine_at(tmp_path) as engine:
        await engine.backend.budget.shed()  # every store idle and closed: nothing left to release
        assert len(engine.backend.budget) == 0
        with _files_left(0):
            with pytest.raises(OutOfFiles) as refused:
                await engine.search(SearchParams(query="beacon", match="exact", limit=5))
            assert refused.value.code == "UNAVAILABLE"  # 503 at every door, never an internal error
            with pytest.raises(OutOfFiles):
                await engine.append(AppendParams(sessionKey="agent:late:main", events=timed("late", [("user", "beacon lighthouse", BASE_TS)])))
            with pytest.raises(OutOfFiles):
                await engine.history(HistoryParams.of({"sessionKey": f"agent:{AGENTS[0]}:main"}))
        # files free again: the same requests are answered, nothing stuck
        await engine.append(AppendParams(sessionKey="agent:late:main", events=timed("late", [("user", "beacon lighthouse", BASE_TS)])))
        found = await engine.search(SearchParams(query="lighthouse", match="exact", limit=5))
        assert [h["messageId"] for h in found["results"]] == ["late1"]
        assert (await engine.history(HistoryParams.of({"sessionKey": f"agent:{AGENTS[0]}:main"})))["messages"]


def test_the_budget_fits_the_open_file_limit_and_keeps_a_configured_bound_below_it():
    at_256 = derive(1024, readers=4, limit=256)
    assert at_256.per_agent == files_per_agent(4)
    assert at_256.agents * at_256.per_agent + at_256.reserve <= 256
    assert at_256.clamped and at_256.agents >= 1
    roomy = derive(1024, readers=4, limit=65536)
    assert roomy.agents == 1024 and not roomy.clamped
    assert "1,024 agents open at most" in roomy.describe()


def test_the_soft_file_limit_is_raised_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard, 512), hard))
        assert raise_file_limit() == hard == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
