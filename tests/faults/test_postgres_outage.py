"""PostgreSQL stopped and started again under a running web process and worker (SPEC §7, §8):
clear 503 UNAVAILABLE answers and /readyz naming the database while it is down, every process
recovering by itself when it is back, nothing acknowledged lost. Against a private server, so the
test may stop it."""

from __future__ import annotations

import pytest

from ..helpers import chain, leaf, msg, wait_until
from ..postgres import PrivatePostgres
from ..reconcile.test_pipeline import Worker
from ..server import Server

KEY = "agent:main:outage"


@pytest.fixture
def private_pg():
    server = PrivatePostgres()
    try:
        yield server
    finally:
        server.close()


def test_a_postgresql_restart_answers_503_meanwhile_and_every_process_recovers_by_itself(
        tmp_path, private_pg, redis_url):
    url = private_pg.database("ss_outage")
    web = Server(tmp_path / "data", tmp_path / "web.log", SESSIONSEARCH_DATABASE_URL=url,
                 SESSIONSEARCH_REDIS_URL=redis_url)
    worker = Worker(tmp_path / "data", redis_url, tmp_path / "worker.log", SESSIONSEARCH_DATABASE_URL=url,
                    SESSIONSEARCH_RECONCILE_SWEEP_EVERY_S="1")
    try:
        status, body = web.post("transcript.append", {"sessionKey": KEY, "events": chain("m", [
            ("user", "the harbour ferry leaves at noon"), ("assistant", "noted: harbour ferry at noon")])})
        assert status == 200 and body["indexed"] == 2
        assert web.get("/readyz")[0] == 200

        private_pg.stop()
        ready = web.ready_when(503)
        assert ready["status"] == "unavailable"
        assert "PostgreSQL is unavailable" in ready["reason"], ready
        for method, request in (("sessions.search", {"query": "harbour"}),
                                ("transcript.append", {"sessionKey": KEY, "events": [
                                    msg("m3", "user", "lost while down?", "m2")]})):
            status, answer = web.post(method, request)
            assert status == 503, (method, answer)
            assert answer["error"]["code"] == "UNAVAILABLE"
            assert answer["error"]["message"].startswith("PostgreSQL is unavailable"), answer
        assert web.get("/metrics")[0] == 200  # the gauges are left out, the endpoint still answers
        assert web.get("/healthz")[0] == 200 and web.proc.poll() is None and worker.proc.poll() is None

        private_pg.start()
        web.ready_when(200)
        status, found = web.post("sessions.search", {"query": "harbour"})
        assert status == 200 and sorted(h["messageId"] for h in found["results"]) == ["m1", "m2"]
        # the 503'd append stored nothing; it goes through now, then a rewind the worker must reconcile
        status, body = web.post("transcript.append", {"sessionKey": KEY, "events": [
            msg("m3", "user", "ferry tickets bought", "m2"), leaf("l1", "m3", "m1"),
            msg("m4", "assistant", "ferry rebooked for the evening", "l1")]})
        assert status == 200 and body["needsReconcile"] is True and body["appended"] == 3
        assert web.post("sessions.search", {"query": "ferry"})[1].get("indexing") is True

        def reconciled():
            status, result = web.post("sessions.search", {"query": "ferry"})
            return status == 200 and "indexing" not in result and result
        result = wait_until(reconciled, what="the worker to reconcile after the restart", every=0.1)
        assert sorted(h["messageId"] for h in result["results"]) == ["m1", "m4"]  # m2, m3 were rewound away
        # the worker's own count: it reconciled (the job counts itself just after its publish commits,
        # which searches may see first), and its gauges read the database again
        def counted() -> str | None:
            text = worker.scrape()
            return text if 'sessionsearch_reconcile_jobs_total{outcome="published"}' in text else None
        scraped = wait_until(counted, what="the worker to count its published job", every=0.1)
        assert 'sessionsearch_index_completeness{agent="main",unit="messages"} 1.0' in scraped
    finally:
        assert worker.stop() == 0
        assert web.stop() == 0
