"""The Dramatiq broker: Redis when SESSIONSEARCH_REDIS_URL is set, else the in-process stub (embedded)."""

from __future__ import annotations

import json
from collections.abc import Callable

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware.asyncio import AsyncIO
from dramatiq.middleware.prometheus import Prometheus

QUEUE = "reconcile"
EMBED_QUEUE = "embed"  # the meaning index's jobs (queue/actors.py)
NAMESPACE = "sessionsearch"
# "agent:wid" -> the window's rebuild_gen when its reconcile job was dead-lettered (worker/sweep.py)
FAILING = f"{NAMESPACE}:failing"
EXHAUSTED_ACTOR = "reconcile_exhausted"
BACKGROUND_TIMEOUT_S = 5.0  # worker processes and sweeps: nobody waits on them, so a slow answer is still an answer


class PrometheusWithoutServer(Prometheus):
    """Dramatiq's message metrics, exported by the worker wrapper's own endpoint, not a forked server."""

    @property
    def forks(self) -> list[Callable[[], int]]:
        return []


def redis_client(url: str, *, timeout_s: float) -> redis.Redis:
    """A client whose every call (connecting included) gives up after `timeout_s`."""
    return redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
                                health_check_interval=30)


def build_broker(redis_url: str | None, *, worker_metrics: bool = False,
                 timeout_s: float = BACKGROUND_TIMEOUT_S) -> dramatiq.Broker:
    """A broker for `redis_url` (None: the stub broker of the embedded mode) with the AsyncIO middleware.

    `timeout_s` bounds each Redis call of the broker. `worker_metrics` keeps Dramatiq's Prometheus
    middleware (worker processes, multiprocess mode); elsewhere it is dropped so no process forks an
    exposition server of its own.
    """
    if redis_url:
        broker: dramatiq.Broker = RedisBroker(client=redis_client(redis_url, timeout_s=timeout_s),
                                              namespace=NAMESPACE)
    else:
        broker = StubBroker()
    for middleware in list(broker.middleware):
        if isinstance(middleware, Prometheus):
            broker.middleware.remove(middleware)
    if worker_metrics:
        broker.add_middleware(PrometheusWithoutServer())
    broker.add_middleware(AsyncIO())
    return broker


def queue_depth(broker: dramatiq.Broker, client: redis.Redis | None = None) -> dict[str, int]:
    """Messages waiting: ready, and delayed (retries waiting for their backoff); asked through
    `client` (default: the broker's)."""
    if isinstance(broker, RedisBroker):  # ids wait in a list per queue; retries wait in its delay queue
        pipe = (client or broker.client).pipeline(transaction=False)
        pipe.llen(f"{NAMESPACE}:{QUEUE}")
        pipe.llen(f"{NAMESPACE}:{QUEUE}.DQ")
        ready, delayed = pipe.execute()
        return {"ready": int(ready), "delayed": int(delayed)}
    if isinstance(broker, StubBroker):
        return {"ready": broker.queues[QUEUE].qsize() if QUEUE in broker.queues else 0,
                "delayed": broker.queues[f"{QUEUE}.DQ"].qsize() if f"{QUEUE}.DQ" in broker.queues else 0}
    return {}


def pending_jobs(broker: dramatiq.Broker, queue_name: str = QUEUE) -> set[tuple[str, int]]:
    """(agent, window) of every job of `queue_name` (reconcile, or embed) waiting in the queue or its
    delay queue.

    Jobs a worker has taken are not counted: that worker may be dead (its messages come back only
    after Dramatiq's heartbeat timeout), so the caller sends those windows again.
    """
    if not isinstance(broker, RedisBroker):
        return set()
    out: set[tuple[str, int]] = set()
    client = broker.client
    for queue in (f"{NAMESPACE}:{queue_name}", f"{NAMESPACE}:{queue_name}.DQ"):
        ids = client.lrange(queue, 0, -1)
        for start in range(0, len(ids), 1000):
            for data in client.hmget(f"{queue}.msgs", ids[start:start + 1000]):
                window = _window_of(data)
                if window is not None:
                    out.add(window)
    return out


def unfinished_jobs(broker: dramatiq.Broker, queue_name: str = QUEUE) -> set[tuple[str, int]]:
    """(agent, window) of every job of `queue_name` sent and not yet finished: waiting, delayed, or
    taken by a worker (Dramatiq keeps a message's body until its worker acknowledges it)."""
    if not isinstance(broker, RedisBroker):
        return set()
    out: set[tuple[str, int]] = set()
    for queue in (f"{NAMESPACE}:{queue_name}", f"{NAMESPACE}:{queue_name}.DQ"):
        for _id, data in broker.client.hscan_iter(f"{queue}.msgs", count=1000):
            window = _window_of(data)
            if window is not None:
                out.add(window)
    return out


def _window_of(data: bytes | str | None) -> tuple[str, int] | None:
    """(agent, window) of a queued message: a reconcile job's, or the window of the job whose
    dead-lettering the message reports; None when gone meanwhile, or not one of ours."""
    if data is None:
        return None
    try:
        message = json.loads(data)
        args = message["args"][0]["args"] if message["actor_name"] == EXHAUSTED_ACTOR else message["args"]
        agent_id, wid = args
        return str(agent_id), int(wid)
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def failing_windows(broker: dramatiq.Broker) -> dict[tuple[str, int], int]:
    """(agent, window) -> rebuild_gen of each window whose last reconcile job was dead-lettered."""
    if not isinstance(broker, RedisBroker):
        return {}
    out = {}
    # a client made with decode_responses answers str, Dramatiq's own bytes: either is read
    for member, gen in broker.client.hgetall(FAILING).items():
        agent_id, _, wid = (member.decode() if isinstance(member, bytes) else member).rpartition(":")
        out[(agent_id, int(wid))] = int(gen)
    return out


def forget_failing(broker: dramatiq.Broker, windows: list[tuple[str, int]]) -> None:
    if windows and isinstance(broker, RedisBroker):
        broker.client.hdel(FAILING, *(f"{agent_id}:{wid}" for agent_id, wid in windows))
