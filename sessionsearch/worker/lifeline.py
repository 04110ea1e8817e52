"""Worker processes die with their parent: the kernel's parent-death signal (Linux prctl).

`kill -9` of `sessionsearch worker` (or of the Dramatiq master under it) would otherwise leave
the processes below it running under init, still reconciling, with no metrics endpoint and no
one to stop them. A parent that died without stopping its children crashed, and they die as if
killed with it: SIGKILL, which reconciliation is built for (a job's claim runs out after its lease
and the next sweep sends the window again). Not SIGTERM: the kernel sends the signal once per
thread of the child, and Dramatiq takes a second SIGTERM as "exit now", which a process whose job
threads still run does not do: it was left hanging.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, sig: signal.Signals = signal.SIGKILL) -> bool:
    """Have `sig` sent to this process when its parent (`parent_pid`) exits; exit at once when it
    already has. False where the platform has no such request (nothing is changed then).

    The request holds from the moment it is made, so a parent that died just before would go
    unnoticed: the parent pid is compared after it, and a process whose parent is no longer
    `parent_pid` (it was reparented) exits.
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:
        os._exit(1)
    return True
