"""The module the Dramatiq CLI loads in each worker process: logging, broker, actor.

`sessionsearch worker` starts `dramatiq --skip-logging … sessionsearch.worker.entry` with the
environment set up (settings, the multiprocess metrics directory) before this module is imported.
"""

import dramatiq

from .. import logging as sslogging
from ..queue import Pipeline
from ..settings import Settings

settings = Settings.load()
sslogging.configure(settings.log_level)
pipeline = Pipeline(settings, worker_metrics=True)
dramatiq.set_broker(pipeline.broker)
broker = pipeline.broker
reconcile = pipeline.reconciler.actor
