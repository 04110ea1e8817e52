"""The common words' postings built when they pay off, and rebuilt on a schedule.

A word's postings answer its one-word searches while fewer than FRESH_LIMIT rows were indexed
after their build (store/sqlite/postings.py). Every `postings_check_every_s` this asks each agent's
store whether a build would pay off now (store/sqlite/postings_build.py: a reconciliation backlog
drained after an import, the index grown by `postings_grow_share`, words about to lose their
postings) and builds just those words; every `optimize_every_s` it rebuilds everything.

Where the build runs: always in a child process, which a stop ends at once (a build of a large
agent runs for minutes and cannot be interrupted midway in a thread; each word's postings are one
transaction, so an ended build leaves them whole). `sessionsearch worker` runs it at the workers'
CPU priority (a worker serves no searches); the embedded `serve` at idle priority: in the web
process, a build's Python work would hold the interpreter lock the event loop needs (searches
slower for the build's whole duration), and a thread cannot be given a lower priority without
stalling the loop whenever it holds the lock.

Except the builds that catch up with a large change (why "first" or "grown": no postings yet,
or the index grown by `postings_grow_share` since the last build, as after an import), which run
at normal priority (CATCH_UP_PRIORITY): until one ends, prefix searches score every matching
row, and on a loaded machine an idle-priority build of 200,000 messages did not end within
minutes of the ingest (bench/bench_fresh.py). A child process at normal priority takes one core
at most, and the searches keep the others. And a build that ends with another due (rows written
while it read) is followed by the next at once, not after the next check's wait.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import structlog

from ..settings import Settings
from .priority import apply_cpu_priority

log = structlog.get_logger("sessionsearch.optimize")

FIRST_AFTER_S = 60.0  # after a start, let the first reconciliation and searches go first
CATCH_UP = frozenset({"first", "grown"})  # why a build catches up with a large change …
CATCH_UP_PRIORITY = "normal"  # … and the CPU priority it runs at
REDONE = CATCH_UP | {"stale"}  # a build that reads the whole index: the next check comes at once after it


def build(settings: Settings, agents: dict[str, str] | None, cpu_priority: str) -> dict[str, Any]:
    """Build postings in this process at `cpu_priority`: for `agents` ({agent: why}) only what
    is missing or about to be given up, or (None) every agent from scratch. Returns the outcome
    per agent, with this process's id and the priority that took effect."""
    from ..engine import Engine

    took = apply_cpu_priority(cpu_priority)  # the threads it starts inherit it

    async def run() -> dict[str, Any]:
        async with Engine(settings=settings) as engine:
            if agents is None:
                agents_built: dict[str, Any] = (await engine.optimize())["agents"]
                return agents_built
            # every agent's score bounds first (milliseconds an agent; a search of many agents needs
            # them all), then the postings builds, which take a second or more an agent
            done: dict[str, Any] = {agent: {"words": {}, "dropped": [], "bounds": await (
                await engine.store(agent)).fold_bounds()} for agent in agents}
            for agent, why in agents.items():
                if why != "bounds":  # the bounds, fresh now, are kept by its optimize
                    built = await (await engine.store(agent)).optimize(min_docs=settings.postings_min_docs,
                                                                       incremental=True)
                    done[agent] = {**built, "bounds": done[agent]["bounds"]}
            return done

    started = time.monotonic()
    done = asyncio.run(run())
    return {"agents": done, "pid": os.getpid(), "cpu_priority": took, "seconds": time.monotonic() - started}


def _child(settings: Settings, agents: dict[str, str] | None, cpu_priority: str, conn: Connection,
           log_level: int) -> None:
    from .. import logging as sslogging

    sslogging.configure(log_level)  # spawned: nothing of the parent's set-up, its log shape and level included
    try:
        conn.send(build(settings, agents, cpu_priority))
    except Exception as exc:  # the parent logs it
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def build_in_child(settings: Settings, agents: dict[str, str] | None, stop: threading.Event | None = None,
                   cpu_priority: str = "idle") -> dict[str, Any]:
    """`build` in a child process at `cpu_priority` (spawned: nothing of the parent's state is
    shared); waits for it and returns its outcome. `stop` set: the child is ended (a build
    stopped midway leaves each word's postings whole: each is one transaction)."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(settings, agents, cpu_priority, theirs, logging.getLogger().level),
                       name="sessionsearch-postings", daemon=True)
    proc.start()
    theirs.close()
    log.info("optimize.started", pid=proc.pid, agents=len(agents) if agents is not None else "all",
             cpu_priority=cpu_priority)
    try:
        while not ours.poll(0.5):
            if stop is not None and stop.is_set():
                proc.terminate()
                log.info("optimize.stopped", pid=proc.pid)
                raise InterruptedError(f"postings build in child {proc.pid} stopped")
            if not proc.is_alive() and not ours.poll(0):
                raise EOFError
        result: dict[str, Any] = ours.recv()
    except EOFError:
        result = {"error": f"postings build in child {proc.pid} exited with {proc.exitcode}"}
    finally:
        ours.close()
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join()
    if "error" in result:
        raise RuntimeError(result["error"])
    return result


class PeriodicOptimize:
    """Builds postings when due and on a schedule, on a thread that mostly sleeps.

    `due` returns the agents whose postings would pay off now ({agent: why}); by default it asks
    a fresh Engine. Each build runs in a child process at `cpu_priority`.
    """

    def __init__(self, settings: Settings, *, cpu_priority: str = "idle",
                 due: Callable[[], dict[str, str]] | None = None) -> None:
        self.settings = settings
        self.every_s = settings.optimize_every_s
        self.check_s = settings.postings_check_every_s
        self.cpu_priority = cpu_priority
        self._due = due or self._due_here
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.builds: list[dict[str, Any]] = []  # the outcome of each build, newest last (the last few)

    def start(self) -> None:
        if (self.every_s > 0 or self.check_s > 0) and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sessionsearch-optimize", daemon=True)
            self._thread.start()

    def request_stop(self) -> None:
        """Ends a build under way within half a second (safe from a signal handler)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None

    def _run(self) -> None:
        next_full = time.monotonic() + min(FIRST_AFTER_S, self.every_s) if self.every_s > 0 else float("inf")
        wait = self.check_s if self.check_s > 0 else self.every_s
        while not self._stop.wait(min(wait, max(0.0, next_full - time.monotonic()))):
            wait = self.check_s if self.check_s > 0 else self.every_s
            try:
                if time.monotonic() >= next_full:
                    self.once()
                    next_full = time.monotonic() + self.every_s
                elif self.check_s > 0 and (due := self._due()):
                    self.once(due)
                    if not REDONE.isdisjoint(due.values()):
                        wait = 0.0  # the rows written while it read may make the next one due now
            except InterruptedError:  # stopping
                break
            except Exception:  # logged; the next round tries again
                log.exception("optimize.failed")

    def once(self, due: dict[str, str] | None = None) -> dict[str, Any]:
        """One build: of the `due` agents' missing words, or (None) of everything; at normal
        priority when it catches up with a large change (CATCH_UP)."""
        catch_up = due is not None and not CATCH_UP.isdisjoint(due.values())
        result = build_in_child(self.settings, due, self._stop, CATCH_UP_PRIORITY if catch_up else self.cpu_priority)
        for agent, done in result["agents"].items():
            log.info("optimize.done", agent=agent, why=(due or {}).get(agent, "schedule"), words=len(done["words"]),
                     kept=done.get("kept", 0), dropped=len(done["dropped"]),
                     rows=sum(w["rows"] for w in done["words"].values()), seconds=round(result["seconds"], 2),
                     prefixes=(done.get("prefixes") or {}).get("count", 0),
                     prefixes_folded=(done.get("prefixes") or {}).get("folded"),  # rows touched, when a fold
                     prefixes_s=(done.get("prefixes") or {}).get("seconds"),
                     bound_terms=(done.get("bounds") or {}).get("terms"),
                     pid=result["pid"], cpu_priority=result["cpu_priority"])
        self.builds = [*self.builds[-9:], {**result, "due": due}]
        return result

    def _due_here(self) -> dict[str, str]:
        from ..engine import Engine

        async def check() -> dict[str, str]:
            async with Engine(settings=self.settings) as engine:
                return await engine.postings_due()
        return asyncio.run(check())
