"""The queue's reads of Redis answer the same whichever reply type the client gives: bytes (the
Dramatiq broker's own client) or str (a client made with `decode_responses`)."""

from __future__ import annotations

import pytest
import redis
from dramatiq.brokers.redis import RedisBroker

from sessionsearch.queue import Pipeline
from sessionsearch.queue.broker import EMBED_QUEUE, FAILING, failing_windows, pending_jobs, unfinished_jobs
from sessionsearch.settings import Settings


@pytest.mark.parametrize("decoded", [False, True], ids=["bytes", "str"])
def test_queued_and_failing_windows_read_alike_from_either_reply_type(redis_url, decoded):
    pipeline = Pipeline(Settings(redis_url=redis_url))
    try:
        pipeline.reconciler.enqueue_sync({"main": {3, 4}})
        pipeline.reconciler.enqueue_embed_sync({"ops": {7}})
        redis.Redis.from_url(redis_url).hset(FAILING, "main:9", 12)
        broker = pipeline.broker
        assert isinstance(broker, RedisBroker)
        if decoded:
            broker.client = redis.Redis.from_url(redis_url, decode_responses=True)
        assert pending_jobs(broker) == {("main", 3), ("main", 4)}
        assert unfinished_jobs(broker) == {("main", 3), ("main", 4)}
        assert pending_jobs(broker, EMBED_QUEUE) == {("ops", 7)}
        assert failing_windows(broker) == {("main", 9): 12}
    finally:
        pipeline.close()
