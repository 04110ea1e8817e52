"""Prometheus metrics: counters and histograms updated where things happen, gauges read at scrape.

prometheus_client is imported lazily: a worker process must point PROMETHEUS_MULTIPROC_DIR at the
shared directory before the first import, so its counters land in files the exporter reads.
Labels stay bounded: agent ids, outcomes and fixed states, never a session id or query.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

_lock = threading.Lock()
_metrics: Metrics | None = None

DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    """The process's metric objects, created once (see `get`)."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.reconcile_jobs = Counter("sessionsearch_reconcile_jobs_total",
                                      "Reconcile jobs finished, by outcome.", ["outcome"])
        self.reconcile_duration = Histogram("sessionsearch_reconcile_duration_seconds",
                                            "Time one reconcile job took.", buckets=DURATION_BUCKETS)
        self.reconcile_rows = Counter("sessionsearch_reconcile_rows_total",
                                      "Index rows reconciliation inserted or deleted.", ["change"])
        self.reconciled_windows = Counter(
            "sessionsearch_reconciled_windows_total",
            "Windows reconciliation published (a job may publish small windows waiting beside its own).")
        self.reconcile_dead_lettered = Counter(
            "sessionsearch_reconcile_dead_lettered_total",
            "Reconcile jobs that failed every retry; the sweep holds their window until it changes.")
        self.enqueues = Counter("sessionsearch_enqueues_total", "Reconcile jobs sent to the queue.")
        self.enqueues_deduplicated = Counter(
            "sessionsearch_enqueues_deduplicated_total",
            "Windows a search found needing reconciliation that were already queued or claimed.")
        self.enqueue_failures = Counter("sessionsearch_enqueue_failures_total",
                                        "Searches whose enqueue could not reach the queue.")
        self.searches = Counter("sessionsearch_searches_total", "Searches answered, by whether the index "
                                "was complete for their scope.", ["indexing"])
        self.search_duration = Histogram("sessionsearch_search_duration_seconds", "Search latency.",
                                         buckets=DURATION_BUCKETS)

        self.embed_batches = Counter("sessionsearch_embed_batches_total",
                                     "Embedding batches, by outcome (stored, lost: the claim was taken over, "
                                     "failed: the embedder failed).", ["outcome"])
        self.embed_duration = Histogram("sessionsearch_embed_batch_duration_seconds",
                                        "Time one embedding batch took, embedding and storing.",
                                        buckets=DURATION_BUCKETS)
        self.embedded_rows = Counter("sessionsearch_embedded_rows_total", "Embeddings the workers stored.")
        self.embedder_errors = Counter("sessionsearch_embedder_errors_total",
                                       "Embedder failures, by kind (timeout, http, shape, other).", ["kind"])

    def observe_embed_batch(self, outcome: str, seconds: float, rows: int) -> None:
        self.embed_batches.labels(outcome=outcome).inc()
        self.embed_duration.observe(seconds)
        if outcome == "stored":
            self.embedded_rows.inc(rows)

    def observe_search(self, seconds: float, indexing: bool) -> None:
        self.searches.labels(indexing="true" if indexing else "false").inc()
        self.search_duration.observe(seconds)

    def observe_reconcile(self, outcome: str, seconds: float, inserted: int, deleted: int,
                          windows: int = 0) -> None:
        self.reconcile_jobs.labels(outcome=outcome).inc()
        if windows:
            self.reconciled_windows.inc(windows)
        self.reconcile_duration.observe(seconds)
        if inserted:
            self.reconcile_rows.labels(change="inserted").inc(inserted)
        if deleted:
            self.reconcile_rows.labels(change="deleted").inc(deleted)


def error_kind(exc: BaseException) -> str:
    """A bounded label for an embedder failure, from what its message says the endpoint did."""
    text = str(exc).lower()
    for kind, words in (("timeout", ("timed out", "timeout")), ("shape", ("shape", "dimension", "not finite")),
                        ("http", ("http", "status", "connect", "refused"))):
        if any(w in text for w in words):
            return kind
    return "other"


def get() -> Metrics:
    """The process's metrics, created on first use."""
    global _metrics
    with _lock:
        if _metrics is None:
            _metrics = Metrics()
        return _metrics


class PipelineCollector:
    """Gauges computed at scrape time: backlog, completeness, postings, queue depth."""

    def __init__(self, agent_status: Callable[[], Iterable[tuple[str, dict[str, int]]]],
                 queue_depth: Callable[[], dict[str, int]] | None = None, *, embedding: bool = True) -> None:
        """`agent_status`: the backend's per-agent counts (Backend.agent_status, store/base.py);
        `embedding`: whether an embedder is configured (without one nothing waits to be embedded)."""
        self.agent_status = agent_status
        self.queue_depth = queue_depth
        self.embedding = embedding

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        backlog = GaugeMetricFamily("sessionsearch_reconcile_backlog",
                                    "Session windows needing reconciliation.", labels=["agent"])
        windows = GaugeMetricFamily("sessionsearch_index_windows", "Session windows, by index state.",
                                    labels=["agent", "state"])
        messages = GaugeMetricFamily("sessionsearch_index_messages",
                                     "Active-branch user/assistant messages, by index state.",
                                     labels=["agent", "state"])
        completeness = GaugeMetricFamily("sessionsearch_index_completeness",
                                         "Indexed share (0..1) of windows and of messages.", labels=["agent", "unit"])
        postings = GaugeMetricFamily("sessionsearch_postings_words",
                                     "Common words with postings (`optimize`): usable, or stale (searched with FTS5 "
                                     "alone until the next optimize).", labels=["agent", "state"])
        log_rows = GaugeMetricFamily("sessionsearch_postings_log_rows",
                                     "Rows indexed since the oldest usable postings were built.", labels=["agent"])
        embedded = GaugeMetricFamily("sessionsearch_embedded_messages",
                                     "Word-index rows with an embedding (any model).", labels=["agent"])
        # what an embed job will take: an incognito session's windows (never embedded) and archived
        # ones are not waiting, so the gauge reaches 0 once the workers are done (store/*/meaning.py)
        embed_backlog = GaugeMetricFamily("sessionsearch_embedding_backlog",
                                          "Session windows with rows waiting for an embedding (never an incognito "
                                          "session's).", labels=["agent"])
        for agent, s in self.agent_status():
            if "embedded" in s:
                embedded.add_metric([agent], s["embedded"])
                embed_backlog.add_metric([agent], s["embed_pending"] if self.embedding else 0)
            postings.add_metric([agent, "usable"], s["postings_usable"])
            postings.add_metric([agent, "stale"], s["postings_stale"])
            log_rows.add_metric([agent], s["index_log_rows"])
            backlog.add_metric([agent], s["pending"])
            windows.add_metric([agent, "indexed"], s["windows"] - s["pending"])
            windows.add_metric([agent, "pending"], s["pending"])
            messages.add_metric([agent, "indexed"], s["indexed_messages"])
            messages.add_metric([agent, "pending"], s["messages"] - s["indexed_messages"])
            completeness.add_metric([agent, "windows"], 1.0 if not s["windows"] else
                                    (s["windows"] - s["pending"]) / s["windows"])
            completeness.add_metric([agent, "messages"], 1.0 if not s["messages"] else
                                    s["indexed_messages"] / s["messages"])
        yield from (backlog, windows, messages, completeness, postings, log_rows, embedded, embed_backlog)
        if self.queue_depth is not None:
            depth = GaugeMetricFamily("sessionsearch_queue_depth",
                                      "Reconcile messages waiting in the queue, ready or delayed (retries).",
                                      labels=["queue"])
            up = GaugeMetricFamily("sessionsearch_queue_up", "Whether the queue answered the last scrape.")
            try:
                counts = self.queue_depth()
            except Exception:
                up.add_metric([], 0)
            else:
                up.add_metric([], 1)
                for name, value in counts.items():
                    depth.add_metric([name], value)
                yield depth
            yield up


def process_registry() -> CollectorRegistry:
    """This process's counters: the default registry, or every process's in multiprocess mode."""
    import os

    from prometheus_client import REGISTRY, CollectorRegistry, multiprocess

    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=folder)
    return registry


@functools.cache
def _without_created_samples() -> None:
    """Drop the `*_created` sample of every counter and histogram, for this process, once.

    They carry the process's start-up time as a value, one series per labelled child: the text
    format's consumers (Prometheus, the alert rules, the dashboard) read none of them, and the
    worker's multiprocess export has none to begin with. prometheus_client reads the switch at
    each collection, so setting it before the first export is enough.
    """
    from prometheus_client import disable_created_metrics

    disable_created_metrics()


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The text format of `registry`: every /metrics export, the web process's and the worker's."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    _without_created_samples()
    return generate_latest(registry), CONTENT_TYPE_LATEST
