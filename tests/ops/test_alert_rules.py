"""deploy/prometheus/alerts.yml under `promtool test rules`, fed with what a scrape of a real store
reads (both stores): an incognito session beside an ordinary one leaves the backlog alerts quiet
once the workers are done, while a backlog that really waits fires."""

from __future__ import annotations

import json
import subprocess

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sessionsearch.engine import Engine
from sessionsearch.metrics import PipelineCollector
from sessionsearch.protocol import AppendParams, UpsertParams

from ..helpers import chain, engine_at
from .test_deploy import DEPLOY, promtool

KEPT, SECRET = "agent:main:kept", "agent:main:secret"
# the gauges the backlog and completeness alerts read, as `name{labels}` series selectors
GAUGES = ("sessionsearch_embedding_backlog", "sessionsearch_reconcile_backlog", "sessionsearch_index_completeness")


def _series(engine: Engine) -> dict[str, float]:
    """The gauges of GAUGES as one scrape of this store reads them, by series, as the web job's."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector(engine.backend.agent_status))
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name in GAUGES:
                labels = {**sample.labels, "job": "sessionsearch-web", "instance": "127.0.0.1:8780"}
                out[sample.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"] = \
                    sample.value
    return out


def _alerts_at(tmp_path, series: dict[str, float], alerts: dict[str, list[dict]]) -> subprocess.CompletedProcess:
    """Run promtool on the rules with `series` held for two hours (a store left as scraped) and
    `alerts` (alert name -> the alerts expected firing) checked at 90 minutes."""
    tests = {"rule_files": [str(DEPLOY / "prometheus" / "alerts.yml")], "evaluation_interval": "1m",
             "tests": [{"interval": "1m",
                        "input_series": [{"series": name, "values": f"{value:g}x120"} for name, value in series.items()],
                        "alert_rule_test": [{"eval_time": "90m", "alertname": name, "exp_alerts": expected}
                                            for name, expected in alerts.items()]}]}
    path = tmp_path / "alerts_test.yml"
    path.write_text(json.dumps(tests, indent=1))  # JSON is YAML
    return subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)


async def test_an_incognito_session_leaves_the_backlog_alerts_quiet_once_the_rest_is_embedded(backend, tmp_path):
    async with engine_at(backend) as engine:
        await engine.upsert_session(UpsertParams(sessionKey=SECRET, incognito=True))
        await engine.append(AppendParams(sessionKey=SECRET, events=chain("s", [("user", "the surprise party is on Saturday"),
                                                ("assistant", "I will bring the cake")])))
        await engine.append(AppendParams(sessionKey=KEPT, events=chain("k", [("user", "we should refinance the mortgage"),
                                              ("assistant", "rates go up next month")])))
        waiting = _series(engine)
        await engine.embed_pending()
        done = _series(engine)
    backlog = 'sessionsearch_embedding_backlog{agent="main",instance="127.0.0.1:8780",job="sessionsearch-web"}'
    assert (waiting[backlog], done[backlog]) == (1, 0)  # the kept session's window, then nothing
    quiet = {name: [] for name in ("SessionsearchEmbeddingBacklogNotDraining", "SessionsearchBacklogNotDraining",
                                   "SessionsearchIndexIncomplete")}
    run = _alerts_at(tmp_path, done, quiet)
    assert run.returncode == 0, run.stdout + run.stderr
    # the control: the same store before its embed job ran, with no worker to run it, fires
    stuck = _alerts_at(tmp_path, waiting, {"SessionsearchEmbeddingBacklogNotDraining": [{
        "exp_labels": {"agent": "main", "severity": "warning"},
        "exp_annotations": {
            "summary": "Embedding backlog of agent main is not draining",
            "description": "1 windows still wait for embeddings; searches by meaning answer with indexing: true. "
                           "Check that workers run and the embedder answers (embed.failed in their logs)."}}],
        "SessionsearchBacklogNotDraining": []})
    assert stuck.returncode == 0, stuck.stdout + stuck.stderr
