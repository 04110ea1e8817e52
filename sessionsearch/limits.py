"""The process's open files, and how many agent stores they leave room for.

Each open agent store holds files: a store open for writing its writer's database and WAL, the WAL
index (shared memory: one per database in a process, whatever its connections) and its
checkpointer's database and WAL (checkpoint.py); each reader connection its own database and WAL
(SQLite opens the WAL per connection). The soft RLIMIT_NOFILE is raised to the hard limit at
start-up (systemd starts a service at a soft limit of 1,024 whatever the hard one), and what it
leaves after a reserve for everything else (sockets, Redis, logs, the short-lived connections of
maintenance, the interpreter's own files) divided by one store's worst case is the number of
stores that may be open at once: the smaller of that and open_agents_max (OpenBudget).

An open that fails for want of files all the same (another process took the system's, or requests
held more stores busy than the bound) releases the idle stores and tries once more; failing again
it is OutOfFiles (503), never an internal error, and the next request finds the files freed
(store/sqlite/files.py).
"""

from __future__ import annotations

import resource
import threading
from dataclasses import dataclass

import structlog

log = structlog.get_logger("sessionsearch.store")

WRITER_FILES = 5  # the writer's database and WAL, the shared memory, the checkpointer's database and WAL
READER_FILES = 2  # a reader's database and WAL
RESERVE_MIN = 64  # files kept for everything but the stores, at the least …
RESERVE_SHARE = 8  # … or this fraction of the limit (1/8) where that is more
UNLIMITED_FILES = 1 << 20  # what an infinite hard limit is taken as (Linux's default nr_open)


def files_per_agent(readers: int) -> int:
    """Open files one agent store holds at most, with `readers` reader connections."""
    return WRITER_FILES + READER_FILES * max(1, readers)


@dataclass(frozen=True)
class FileBudget:
    """The process's open-file limit and the agent stores it leaves room for."""

    limit: int  # the soft RLIMIT_NOFILE, raised to the hard one where it was lower
    per_agent: int  # files one open store holds at most
    reserve: int  # files kept for everything else
    agents: int  # stores that may be open at once: the smaller of the room and open_agents_max
    configured: int  # open_agents_max
    explicit: bool = False  # open_agents_max was set (not its default): lowering it is a warning

    @property
    def room(self) -> int:
        """Stores the files leave room for, open_agents_max aside (shared by a process's backends)."""
        return max(1, (self.limit - self.reserve) // self.per_agent)

    @property
    def clamped(self) -> bool:
        return self.agents < self.configured

    def describe(self) -> str:
        """The one line `sessionsearch status` prints."""
        return describe(self.to_dict())

    def to_dict(self) -> dict[str, int]:
        return {"limit": self.limit, "perAgent": self.per_agent, "reserve": self.reserve,
                "agents": self.agents, "configured": self.configured}


def describe(budget: dict[str, int]) -> str:
    """A FileBudget's dict (to_dict) in a line: `open files: limit 1,024, 13 per open agent, …`."""
    clamp = f" (search.openAgentsMax {budget['configured']:,} lowered to fit)" \
        if budget["agents"] < budget["configured"] else ""
    return (f"open files: limit {budget['limit']:,}, {budget['perAgent']} per open agent, "
            f"{budget['agents']:,} agents open at most{clamp}")


def raise_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (a no-op where it is there already); returns
    the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = resource.RLIM_INFINITY
    target = hard if hard != infinite else UNLIMITED_FILES  # Linux refuses a soft limit past nr_open
    if soft == infinite or soft >= target:
        return target
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):  # past the kernel's nr_open: keep the soft limit there is
        return soft
    return target


def derive(open_agents_max: int, readers: int, limit: int | None = None, *, explicit: bool = False) -> FileBudget:
    """The budget under `limit` open files (None: this process's, raised to its hard limit first);
    `explicit`: open_agents_max was configured rather than left at its default."""
    limit = raise_file_limit() if limit is None else limit
    per_agent = files_per_agent(readers)
    reserve = max(RESERVE_MIN, limit // RESERVE_SHARE)
    room = max(1, (limit - reserve) // per_agent)
    return FileBudget(limit, per_agent, reserve, max(1, min(room, open_agents_max)), open_agents_max, explicit)


_said: set[FileBudget] = set()  # budgets logged by this process already (an engine per test, say)
_said_lock = threading.Lock()


def announce(budget: FileBudget) -> None:
    """Log the budget, once a process: a warning where it lowered an open_agents_max configured."""
    with _said_lock:
        if budget in _said:
            return
        _said.add(budget)
    say = log.warning if budget.clamped and budget.explicit else log.info
    say("store.file_budget", limit=budget.limit, files_per_agent=budget.per_agent, reserve=budget.reserve,
        agents_open_max=budget.agents, open_agents_max=budget.configured,
        **({"hint": "raise the open-file limit (LimitNOFILE) to keep open_agents_max"} if budget.clamped else {}))
