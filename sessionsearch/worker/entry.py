"""The module the Dramatiq CLI loads in each worker process: CPU priority, logging, broker, actor.

`sessionsearch worker` starts the Dramatiq CLI (worker/master.py) with `sessionsearch.worker.entry`
and the environment set up (settings, the multiprocess metrics directory) before this module is
imported.
"""

import multiprocessing
import os

import dramatiq
import structlog

from .. import logging as sslogging
from ..queue import Pipeline
from ..queue.broker import BACKGROUND_TIMEOUT_S
from ..settings import Settings
from .lifeline import die_with_parent
from .priority import apply_cpu_priority

# Dramatiq forks this process from its master: it dies with the master (the master dies with the wrapper)
_parent = multiprocessing.parent_process()
if _parent is not None and _parent.pid is not None:
    die_with_parent(_parent.pid)
settings = Settings.load()
sslogging.configure(settings.log_level)
# before Pipeline and Dramatiq start any thread: threads inherit the policy
structlog.get_logger("sessionsearch.worker").info(
    "worker.cpu_priority", pid=os.getpid(), wanted=settings.worker_cpu_priority,
    applied=apply_cpu_priority(settings.worker_cpu_priority))
pipeline = Pipeline(settings, worker_metrics=True, timeout_s=BACKGROUND_TIMEOUT_S)
dramatiq.set_broker(pipeline.broker)
broker = pipeline.broker
reconcile = pipeline.reconciler.actor
