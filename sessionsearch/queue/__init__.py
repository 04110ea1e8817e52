"""The broker (Redis, or in-process when embedded), the reconcile actor, enqueue and dedup."""

from __future__ import annotations

import dramatiq
import structlog
from dramatiq.asyncio import get_event_loop_thread
from dramatiq.middleware.asyncio import AsyncIO

from ..settings import Settings
from .actors import Reconciler
from .broker import build_broker, queue_depth, redis_client

log = structlog.get_logger("sessionsearch.queue")

__all__ = ["Pipeline", "Reconciler", "build_broker", "queue_depth"]


class _Lifecycle(dramatiq.Middleware):
    """Tells running jobs to stop between batches, and closes the actor's engine on shutdown."""

    def __init__(self, reconciler: Reconciler) -> None:
        self.reconciler = reconciler

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self.reconciler.stopping.set()

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        # still running: "after" hooks run in reverse order, and this middleware sits after AsyncIO
        loop_thread = get_event_loop_thread()
        if loop_thread is not None:
            loop_thread.run_coroutine(self.reconciler.close_engine())


class Pipeline:
    """The queue side of one process: a broker, the reconcile actor, and (embedded) a worker.

    With `settings.redis_url` the broker is Redis and jobs run in `sessionsearch worker`
    processes; without it the broker is Dramatiq's stub and a worker thread in this process runs
    them, so one process serves and reconciles with no Redis at all.
    """

    def __init__(self, settings: Settings, *, worker_metrics: bool = False, timeout_s: float | None = None) -> None:
        """`timeout_s` bounds the broker's Redis calls (default: the request timeout, as the web
        process needs); /readyz's ping and the queue-depth gauge always use the request timeout."""
        self.settings = settings
        request_s = settings.redis_request_timeout_ms / 1000
        self.broker = build_broker(settings.redis_url, worker_metrics=worker_metrics,
                                   timeout_s=request_s if timeout_s is None else timeout_s)
        self.probe = redis_client(settings.redis_url, timeout_s=request_s) if settings.redis_url else None
        self.reconciler = Reconciler(self.broker, settings)
        self.broker.add_middleware(_Lifecycle(self.reconciler), after=AsyncIO)
        self.worker: dramatiq.Worker | None = None

    @property
    def embedded(self) -> bool:
        return not self.settings.redis_url

    def start_embedded_worker(self, threads: int = 1) -> None:
        if self.worker is None:
            self.worker = dramatiq.Worker(self.broker, worker_threads=threads, worker_timeout=100)
            self.worker.start()
            log.info("worker.started", mode="embedded", threads=threads)

    def queue_depth(self) -> dict[str, int]:
        return queue_depth(self.broker, self.probe)

    def ping(self) -> None:
        """Raises a redis error when Redis does not answer within the request timeout."""
        if self.probe is not None:
            self.probe.ping()

    def close(self) -> None:
        self.reconciler.close()
        if self.worker is not None:
            self.worker.stop()
            self.worker = None
        self.broker.close()
        if self.probe is not None:
            self.probe.close()
