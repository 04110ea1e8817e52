"""The Dramatiq master that `sessionsearch worker` starts: Dramatiq's CLI, bound to the wrapper's life.

`python -m sessionsearch.worker.master ARGS` is `python -m dramatiq ARGS` in a process that is
killed when the wrapper dies (worker/lifeline.py); the wrapper passes its pid in PARENT_ENV.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

from .. import logging as sslogging
from ..settings import Settings
from .lifeline import die_with_parent

PARENT_ENV = "SESSIONSEARCH_WORKER_WRAPPER_PID"


def main() -> int:
    die_with_parent(int(os.environ[PARENT_ENV]))
    # Dramatiq runs with --skip-logging: its master's own lines (a worker process that died, a
    # reload) take the JSON shape here, and the worker processes set it up again (entry.py)
    sslogging.configure(Settings.load().log_level)
    # worker processes are this process's children (entry.py binds them to it by pid): Python 3.14
    # would start them from a forkserver instead, whose pid they would then see as their parent's
    if "--use-spawn" not in sys.argv:
        multiprocessing.set_start_method("fork", force=True)
    import dramatiq.__main__
    from dramatiq.cli import main as dramatiq_main

    # Dramatiq reloads on SIGHUP by executing `python -m dramatiq` again when argv[0] is its own
    # __main__; the re-executed process keeps the parent-death request (execve preserves it)
    sys.argv[0] = dramatiq.__main__.__file__
    code: int = dramatiq_main()
    return code


if __name__ == "__main__":
    sys.exit(main())
