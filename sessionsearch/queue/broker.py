"""The Dramatiq broker: Redis when SESSIONSEARCH_REDIS_URL is set, else the in-process stub (embedded)."""

from __future__ import annotations

import json

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware.asyncio import AsyncIO
from dramatiq.middleware.prometheus import Prometheus

QUEUE = "reconcile"
NAMESPACE = "sessionsearch"


class PrometheusWithoutServer(Prometheus):
    """Dramatiq's message metrics, exported by the worker wrapper's own endpoint, not a forked server."""

    @property
    def forks(self):
        return []


def build_broker(redis_url: str | None, *, worker_metrics: bool = False) -> dramatiq.Broker:
    """A broker for `redis_url` (None: the stub broker of the embedded mode) with the AsyncIO middleware.

    `worker_metrics` keeps Dramatiq's Prometheus middleware (worker processes, multiprocess mode);
    elsewhere it is dropped so no process forks an exposition server of its own.
    """
    if redis_url:
        broker: dramatiq.Broker = RedisBroker(url=redis_url, namespace=NAMESPACE, socket_connect_timeout=2,
                                              socket_timeout=5, health_check_interval=30)
    else:
        broker = StubBroker()
    for middleware in list(broker.middleware):
        if isinstance(middleware, Prometheus):
            broker.middleware.remove(middleware)
    if worker_metrics:
        broker.add_middleware(PrometheusWithoutServer())
    broker.add_middleware(AsyncIO())
    return broker


def queue_depth(broker: dramatiq.Broker) -> dict[str, int]:
    """Messages waiting: ready, and delayed (retries waiting for their backoff)."""
    if isinstance(broker, RedisBroker):  # ids wait in a list per queue; retries wait in its delay queue
        pipe = broker.client.pipeline(transaction=False)
        pipe.llen(f"{NAMESPACE}:{QUEUE}")
        pipe.llen(f"{NAMESPACE}:{QUEUE}.DQ")
        ready, delayed = pipe.execute()
        return {"ready": int(ready), "delayed": int(delayed)}
    if isinstance(broker, StubBroker):
        return {"ready": broker.queues[QUEUE].qsize() if QUEUE in broker.queues else 0,
                "delayed": broker.queues[f"{QUEUE}.DQ"].qsize() if f"{QUEUE}.DQ" in broker.queues else 0}
    return {}


def pending_jobs(broker: dramatiq.Broker) -> set[tuple[str, int]]:
    """(agent, window) of every reconcile job waiting in the queue or its delay queue.

    Jobs a worker has taken are not counted: that worker may be dead (its messages come back only
    after Dramatiq's heartbeat timeout), so the caller sends those windows again.
    """
    if not isinstance(broker, RedisBroker):
        return set()
    out: set[tuple[str, int]] = set()
    client = broker.client
    for queue in (f"{NAMESPACE}:{QUEUE}", f"{NAMESPACE}:{QUEUE}.DQ"):
        ids = client.lrange(queue, 0, -1)
        for start in range(0, len(ids), 1000):
            for data in client.hmget(f"{queue}.msgs", ids[start:start + 1000]):
                try:
                    agent_id, wid = json.loads(data)["args"]
                    out.add((str(agent_id), int(wid)))
                except (ValueError, KeyError, TypeError):
                    continue  # gone meanwhile, or not one of ours
    return out
