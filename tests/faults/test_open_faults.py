"""The first open of an agent database failing: nothing leaks, and only what this process made goes.

On a full disk a gateway retries its append to a new agent; every retry opens the database anew and
fails. Each must leave the web process as it found it (threads, file descriptors), answer 503, and
never remove a database that another process made meanwhile.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from contextlib import closing

import pytest

from sessionsearch import StorageFull, Unavailable
from sessionsearch.protocol import AppendParams
from sessionsearch.store.sqlite import writer as writer_module

from ..helpers import engine_at, msg
from ..server import Server
from .test_faults import fill, small_disk

RETRIES = 6
SETTLE_S = 10


def _threads_and_fds(pid: int) -> tuple[int, int]:
    return len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


def _settled(pid: int, at_most: tuple[int, int]) -> tuple[int, int]:
    """The process's counts once no more than `at_most`, or as they are after a while. Threads and
    sockets of the server's or the engine's own come and go for a moment around a request (seen:
    one thread, one descriptor, e.g. a closed aiosqlite connection's thread); what a retry leaks stays (before the fix: a thread and ~3
    descriptors per retry). The wait only tells those apart."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        now = _threads_and_fds(pid)
        if (now[0] <= at_most[0] and now[1] <= at_most[1]) or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def _assert_no_more(pid: int, before: tuple[int, int]) -> tuple[int, int]:
    now = _settled(pid, before)
    assert now[0] <= before[0] and now[1] <= before[1], f"threads, fds: {before} before, {now} now"
    return now


def _append_to_new_agent(server: Server, k: int) -> tuple[int, dict]:
    return server.post("transcript.append", {"sessionKey": "agent:ops:new",
                                             "events": [msg(f"o{k}", "user", "the ops agent starts", None)]})


def test_appends_retried_to_a_new_agent_on_a_full_disk_answer_503_and_leak_no_thread_or_descriptor(tmp_path):
    # How much room is left decides where the first open fails: with none, at its first write; with
    # some, after a few migrations have committed (the checkpoint thread has started by then).
    counts: dict[int, list[tuple[int, int]]] = {}
    for leave_kib in (0, 128):
        with small_disk(tmp_path / f"disk{leave_kib}", 16) as disk:
            # no embedder: its background jobs would open threads and files of their own meanwhile
            server = Server(disk, tmp_path / f"server{leave_kib}.log", SESSIONSEARCH_EMBEDDER="none")
            filler = None
            try:
                assert server.post("transcript.append", {"sessionKey": "agent:main:a",
                                                         "events": [msg("a1", "user", "warm up", None)]})[0] == 200
                filler = fill(disk, leave_bytes=leave_kib << 10)
                seen = []
                for k in range(RETRIES):
                    status, answer = _append_to_new_agent(server, k)
                    assert status == 503 and "disk is full" in answer["error"]["message"], (k, answer)
                    seen.append(_threads_and_fds(server.proc.pid))
                counts[leave_kib] = [*seen, _assert_no_more(server.proc.pid, seen[0])]
                assert not (disk / "agents" / "ops.db").exists(), "a half-made database would list the agent"
                assert sorted(p.name for p in (disk / "agents").iterdir()) == [
                    "main.db", "main.db-shm", "main.db-turn", "main.db-wal"], "a retry left files behind"
            finally:
                if filler is not None:
                    filler.unlink()
                assert server.stop() == 0
    print("threads, fds after each refused append (and settled), by KiB left free:", counts)


MAKE_OTHER = """
import asyncio, sys
from sessionsearch import AppendParams, Engine, Settings
async def main():
    engine = Engine(sys.argv[1], settings=Settings(data_dir=sys.argv[1]))
    await engine.open()
    try:
        await engine.append(AppendParams(sessionKey="agent:ops:theirs", events=[{"type": "message", "id": "t1",
            "parentId": None, "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": "theirs"}}]))
    finally:
        await engine.close()
asyncio.run(main())
"""


def _full() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = sqlite3.SQLITE_FULL
    return exc


async def test_a_database_another_process_creates_while_this_one_fails_to_create_it_is_kept(tmp_path, monkeypatch):
    made = []

    def other_process_first(self):
        # Another process (an importer, a worker) creates the same agent while this one migrates
        # its new database; then this one's migration meets a full disk.
        if not made:
            made.append(subprocess.run([sys.executable, "-c", MAKE_OTHER, str(tmp_path)], timeout=120).returncode)
            raise _full()
        real_migrate(self)

    real_migrate = writer_module.SqliteWriter.migrate
    monkeypatch.setattr(writer_module.SqliteWriter, "migrate", other_process_first)
    async with engine_at(tmp_path) as engine:
        threads, fds = _threads_and_fds(os.getpid())
        with pytest.raises(StorageFull):
            await engine.append(AppendParams(sessionKey="agent:ops:ours", events=[msg("m1", "user", "ours", None)]))
        assert made == [0]
        db = tmp_path / "agents" / "ops.db"
        assert db.exists(), "the other process's database was removed"
        with closing(sqlite3.connect(db)) as conn:
            assert conn.execute("SELECT count(*) FROM events WHERE event_id = 't1'").fetchone() == (1,)
        _assert_no_more(os.getpid(), (threads, fds))
        # once space returns, this process appends to the database the other one made
        assert (await engine.append(AppendParams(sessionKey="agent:ops:ours", events=[msg("m1", "user", "ours", None)])))["appended"] == 1
        assert sorted(p.name for p in db.parent.iterdir() if p.name.startswith(".")) == []


async def test_a_turnstile_file_that_cannot_be_opened_answers_unavailable_and_leaks_no_thread(tmp_path):
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:ops:a", events=[msg("m1", "user", "first", None)]))
    (tmp_path / "agents" / "ops.db-turn").unlink()
    (tmp_path / "agents" / "ops.db-turn").mkdir()  # os.open fails with EISDIR
    threads, fds = _threads_and_fds(os.getpid())
    for _ in range(3):  # the engine opens every agent's store as it opens
        with pytest.raises(Unavailable, match="cannot open .*ops.db"):
            async with engine_at(tmp_path):
                pass
    _assert_no_more(os.getpid(), (threads, fds))
