"""`sessionsearch worker`: sweeps, a metrics endpoint, scheduled `optimize`, and the Dramatiq CLI as a child.

The parent process wipes the multiprocess metrics directory, enqueues every window still needing
reconciliation (the startup sweep, then periodic ones: worker/sweep.py), serves /metrics (the
workers' counters from the shared directory plus gauges read at scrape time), then runs the
Dramatiq CLI (`--skip-logging`, `sessionsearch.worker.entry`) as a child that dies with it
(worker/master.py) and forwards SIGTERM/SIGINT to it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

import structlog

from ..errors import InvalidRequest
from ..settings import Settings
from .master import PARENT_ENV
from .optimize import PeriodicOptimize

log = structlog.get_logger("sessionsearch.worker")


def prepare_metrics_dir(path: str | None) -> Path:
    """The multiprocess directory, emptied; set in the environment before prometheus_client loads."""
    folder = Path(path or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
                  or Path(tempfile.gettempdir()) / f"sessionsearch-worker-metrics-{os.getpid()}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    os.environ["prometheus_multiproc_dir"] = str(folder)
    os.environ["dramatiq_prom_db"] = str(folder)
    return folder


def serve_metrics(host: str, port: int, folder: Path, settings: Settings,
                  depth: Callable[[], dict[str, int]]) -> ThreadingHTTPServer:
    from prometheus_client import CollectorRegistry, multiprocess

    from ..metrics import PipelineCollector, exposition
    from ..store import backend_for

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(folder))
    registry.register(PipelineCollector(backend_for(settings).agent_status, depth,
                                        embedding=settings.embedder != "none"))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body, content_type = exposition(registry)
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="sessionsearch-metrics", daemon=True).start()
    return server


def run_worker(settings: Settings, *, processes: int, threads: int, metrics_host: str, metrics_port: int,
               metrics_dir: str | None = None) -> int:
    if not settings.redis_url:
        raise InvalidRequest("sessionsearch worker needs SESSIONSEARCH_REDIS_URL; without Redis, "
                             "`sessionsearch serve` reconciles in-process", field="SESSIONSEARCH_REDIS_URL")
    stop_requested: list[int] = []
    child: subprocess.Popen[bytes] | None = None
    optimizer: PeriodicOptimize | None = None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("worker.signal", signal=signal.Signals(signum).name)
        stop_requested.append(signum)
        if optimizer is not None:
            optimizer.request_stop()  # a build under way ends now, not after the job processes
        if child is not None:
            child.send_signal(signum)  # forwarded once: the child runs in its own session

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    folder = prepare_metrics_dir(metrics_dir)
    from ..queue import Pipeline
    from ..queue.broker import BACKGROUND_TIMEOUT_S
    from .sweep import Sweeper

    pipeline = Pipeline(settings, timeout_s=BACKGROUND_TIMEOUT_S)
    sweeper = Sweeper(settings, pipeline.reconciler)
    sweeper.start()
    sweeper.first_try.wait()  # with Redis up, the startup sweep's jobs are queued before the workers start
    server = serve_metrics(metrics_host, metrics_port, folder, settings, pipeline.queue_depth)
    optimizer = PeriodicOptimize(settings, cpu_priority=settings.worker_cpu_priority)
    log.info("worker.metrics", url=f"http://{metrics_host}:{server.server_address[1]}/metrics")
    env = {**os.environ, "SESSIONSEARCH_DATA_DIR": str(Path(settings.data_dir).resolve()),
           "SESSIONSEARCH_REDIS_URL": settings.redis_url, "SESSIONSEARCH_LOG_LEVEL": settings.log_level,
           "SESSIONSEARCH_WORKER_CPU_PRIORITY": settings.worker_cpu_priority}
    if settings.database_url:  # a --database-url flag reaches the job processes too
        env["SESSIONSEARCH_DATABASE_URL"] = settings.database_url
    if settings.config_path:
        env["SESSIONSEARCH_CONFIG"] = str(Path(settings.config_path).resolve())
    if stop_requested:  # asked to stop while starting up: nothing is running yet
        sweeper.stop()
        server.shutdown()
        pipeline.close()
        log.info("worker.exited", code=0)
        return 0
    env[PARENT_ENV] = str(os.getpid())
    child = subprocess.Popen([sys.executable, "-m", "sessionsearch.worker.master", "--skip-logging",
                              "--processes", str(processes),
                              "--threads", str(threads), "sessionsearch.worker.entry"], env=env,
                             start_new_session=True)  # signals reach it once: forwarded from here
    log.info("worker.started", pid=child.pid, processes=processes, threads=threads)
    optimizer.start()
    if stop_requested:
        child.send_signal(stop_requested[-1])
    code = child.wait()
    if code < 0 and -code in stop_requested:
        code = 0  # it died of the signal we forwarded (before it could handle it): a requested stop
    optimizer.stop()
    sweeper.stop()
    server.shutdown()
    pipeline.close()
    log.info("worker.exited", code=code)
    return code
