"""What a scrape of /metrics carries, from the web process and from the worker."""

from __future__ import annotations

import re

from ..helpers import wait_until
from ..reconcile.test_pipeline import Worker
from ..server import Server
from .test_deploy import reconciled_by_the_worker


def _samples(exposition: str) -> set[str]:
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in exposition.splitlines() if line and not line.startswith("#")}


def test_neither_the_web_process_nor_the_worker_exports_created_samples(tmp_path, redis_url):
    web = Server(tmp_path / "data", tmp_path / "web.log", SESSIONSEARCH_REDIS_URL=redis_url)
    worker = Worker(tmp_path / "data", redis_url, tmp_path / "worker.log")
    try:
        reconciled_by_the_worker(web)
        web_samples = _samples(web.get("/metrics")[1])

        def counted() -> set[str] | None:  # the job counts itself after it publishes, which the search may see first
            samples = _samples(worker.scrape())
            return samples if "sessionsearch_reconcile_jobs_total" in samples else None

        worker_samples = wait_until(counted, 30, "the worker's metrics to count the job", every=0.2)
        # the counters and histograms are there, without their start-up time beside them
        assert {"sessionsearch_searches_total", "sessionsearch_search_duration_seconds_count"} <= web_samples
        assert "sessionsearch_reconcile_duration_seconds_count" in worker_samples
        assert sorted(n for n in web_samples | worker_samples if n.endswith("_created")) == []
    finally:
        assert worker.stop() == 0
        assert web.stop() == 0
