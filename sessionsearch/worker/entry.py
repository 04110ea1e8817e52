"""The module the Dramatiq CLI loads in each worker process: CPU priority, logging, broker, actor.

`sessionsearch worker` starts `dramatiq --skip-logging … sessionsearch.worker.entry` with the
environment set up (settings, the multiprocess metrics directory) before this module is imported.
"""

import os

import dramatiq
import structlog

from .. import logging as sslogging
from ..queue import Pipeline
from ..queue.broker import BACKGROUND_TIMEOUT_S
from ..settings import Settings
from .priority import apply_cpu_priority

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
