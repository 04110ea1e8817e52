"""The CPU priority of worker processes: reconciliation is background work that gives way.

A search and a reconciliation transaction running at once on a small machine compete for CPU, and
at equal priority the search waits for a time slice (its CPU time unchanged). Under SCHED_IDLE the kernel runs a
worker thread only on CPU time no other thread wants and preempts it as soon as a search or an
append wakes up, so the worker still gets every idle core. Threads inherit the policy, so it is
applied in each worker process before Dramatiq starts its threads.
"""

from __future__ import annotations

import os


def apply_cpu_priority(mode: str) -> str:
    """Put this process (and the threads it starts later) at `mode`; returns what took effect.

    `idle` is SCHED_IDLE where the platform has it, else the lowest nice value.
    """
    if mode == "normal":
        return "normal"
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return "idle"
        except OSError:
            pass
    try:
        os.nice(19 - os.nice(0))
        return "nice 19"
    except OSError:
        return "normal"
