"""deploy/ and the Procfile, checked as an operator would run them (SPEC §8)."""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from sessionsearch.cli import build_parser

from ..helpers import chain, wait_until
from ..reconcile.test_pipeline import Worker
from ..server import Server
from ..services import free_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: `make test` installs Debian's prometheus package (scripts/services)")
    return path


def test_promtool_accepts_the_scrape_config_and_the_rules():
    for args in (["check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
                 ["check", "rules", str(DEPLOY / "prometheus" / "alerts.yml")]):
        run = subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout + run.stderr


def test_the_alert_rules_cover_what_operators_need():
    text = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    for alert in ("SessionsearchBacklogNotDraining", "SessionsearchIndexIncomplete", "SessionsearchWorkersDown",
                  "SessionsearchReconcileFailuresRising", "SessionsearchSearchLatencyHigh", "SessionsearchPostingsStale"):
        assert f"alert: {alert}" in text
    assert "for: 15m" in text and "for: 30m" in text and "< 0.99" in text


def _named_metrics() -> set[str]:
    text = (DEPLOY / "prometheus" / "alerts.yml").read_text() + (DEPLOY / "grafana" / "sessionsearch.json").read_text()
    return set(re.findall(r"sessionsearch_[a-z_]+", text))


def _sample_names(exposition: str) -> set[str]:
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in exposition.splitlines() if line and not line.startswith("#")}


def reconciled_by_the_worker(web: Server) -> None:
    """Appends whose window a leaf control makes need reconciling, then searches until the worker
    has reconciled what they enqueued: its job counters have counted."""
    web.post("transcript.append", {"sessionKey": "agent:main:a", "events": chain("m", [("user", "hello there")])})
    web.post("transcript.append", {"sessionKey": "agent:main:a", "events": [
        {"type": "leaf", "id": "l1", "parentId": "m1", "targetId": "m1"},
        {"type": "message", "id": "x", "parentId": None, "message": {"role": "user", "content": "hello again"}}]})
    wait_until(lambda: "indexing" not in web.post("sessions.search", {"query": "hello"})[1], 60,
               "the worker to reconcile the appends", every=0.1)


def test_metrics_named_by_rules_and_dashboard_exist_and_prometheus_scrapes_them(tmp_path, redis_url):
    web = Server(tmp_path / "data", tmp_path / "web.log", SESSIONSEARCH_REDIS_URL=redis_url)
    worker = Worker(tmp_path / "data", redis_url, tmp_path / "worker.log")
    prom = None
    try:
        reconciled_by_the_worker(web)
        missing: list[str] = []

        def exported() -> bool:
            names = _sample_names(web.get("/metrics")[1]) | _sample_names(worker.scrape())
            missing[:] = [n for n in sorted(_named_metrics()) if n not in names and f"{n}_total" not in names]
            return not missing

        # the job counts its rows after it publishes, which the search above may see first
        wait_until(exported, 30, lambda: f"{missing} named in deploy/ but not exported", every=0.2)

        config = (DEPLOY / "prometheus" / "prometheus.yml").read_text()
        config = config.replace("127.0.0.1:8780", f"127.0.0.1:{web.port}").replace("127.0.0.1:9191",
                                                                                  f"127.0.0.1:{worker.port}")
        config = config.replace("scrape_interval: 15s", "scrape_interval: 1s")
        (tmp_path / "prom").mkdir()
        (tmp_path / "prom" / "prometheus.yml").write_text(config)
        shutil.copy(DEPLOY / "prometheus" / "alerts.yml", tmp_path / "prom" / "alerts.yml")
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus is missing: `make test` installs Debian's prometheus package")
        port = free_port()
        prom = subprocess.Popen([binary, f"--config.file={tmp_path / 'prom' / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'prom' / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prom.log", "w"))
        query = urllib.parse.quote('sessionsearch_index_completeness{unit="messages",job="sessionsearch-worker"}')

        def scraped() -> list | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query={query}", timeout=5) as r:
                    return json.loads(r.read())["data"]["result"]
            except OSError:
                return None

        result = wait_until(scraped, 90, lambda: f"Prometheus to scrape: {(tmp_path / 'prom.log').read_text()[-2000:]}",
                            every=0.5)
        assert float(result[0]["value"][1]) == 1.0 and result[0]["metric"]["agent"] == "main"
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(30)
        assert worker.stop() == 0
        assert web.stop() == 0


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(DEPLOY / "systemd" / name)
    return parser


def test_systemd_units_restart_and_run_commands_the_cli_accepts():
    for name, command in (("sessionsearch-web.service", "serve"), ("sessionsearch-worker.service", "worker")):
        unit = _unit(name)
        service = unit["Service"]
        assert service["Restart"] in ("on-failure", "always")
        argv = shlex.split(service["ExecStart"])
        assert argv[0].endswith("/sessionsearch") and argv[1] == command
        build_parser().parse_args(argv[1:])  # raises SystemExit on a flag the CLI does not know
        assert service["EnvironmentFile"] == "/etc/sessionsearch/env"
    assert _unit("sessionsearch-worker.service")["Service"]["KillMode"] == "mixed"
    verify = shutil.which("systemd-analyze")
    if verify:  # the syntax, where systemd's own checker is installed (it is on Debian)
        run = subprocess.run([verify, "verify", "--man=no", *(str(p) for p in (DEPLOY / "systemd").glob("*.service"))],
                             capture_output=True, text=True, timeout=60)
        problems = [line for line in (run.stdout + run.stderr).splitlines()
                    if line.strip() and "Command /opt/sessionsearch" not in line and "not executable" not in line
                    and "User=" not in line and "Failed to" not in line and "sessionsearch" in line]
        assert not problems, problems


def test_the_procfile_runs_web_and_worker_against_redis(tmp_path, redis_url):
    procfile = (ROOT / "Procfile").read_text().splitlines()
    commands = dict(line.split(": ", 1) for line in procfile if line.strip())
    assert set(commands) == {"web", "worker"}
    for command in commands.values():
        build_parser().parse_args(shlex.split(command)[1:])
    web_port, metrics_port = free_port(), free_port()
    (tmp_path / "Procfile").write_text(f"web: {commands['web']} --port {web_port}\n"
                                       f"worker: {commands['worker']} --metrics-port {metrics_port}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    env.update(SESSIONSEARCH_DATA_DIR=str(tmp_path / "data"), SESSIONSEARCH_REDIS_URL=redis_url,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    honcho = subprocess.Popen([sys.executable, "-m", "honcho", "start"], cwd=tmp_path, env=env,
                              stdout=open(tmp_path / "honcho.log", "w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        up = set()

        def both_up() -> bool:
            for name, url in (("web", f"http://127.0.0.1:{web_port}/readyz"),
                              ("worker", f"http://127.0.0.1:{metrics_port}/metrics")):
                try:
                    with urllib.request.urlopen(url, timeout=2) as r:
                        if r.status == 200:
                            up.add(name)
                except OSError:
                    pass
            return up == {"web", "worker"}

        wait_until(both_up, 90, lambda: f"web and worker up: {(tmp_path / 'honcho.log').read_text()[-3000:]}", every=0.2)
    finally:
        os.killpg(honcho.pid, signal.SIGTERM)
        honcho.wait(60)



def _env_file(name: str) -> dict[str, str]:
    lines = (DEPLOY / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def test_the_postgres_units_migrate_first_then_run_one_web_process_per_port():
    migrate = _unit("sessionsearch-migrate.service")
    assert migrate["Service"]["Type"] == "oneshot" and migrate["Service"]["RemainAfterExit"] == "yes"
    argv = shlex.split(migrate["Service"]["ExecStart"])
    assert argv[0].endswith("/sessionsearch") and argv[1:] == ["migrate"]
    build_parser().parse_args(argv[1:])
    web = _unit("sessionsearch-web@.service")
    ports = []
    for port in ("8780", "8781"):  # what `systemctl start sessionsearch-web@8781` runs
        argv = shlex.split(web["Service"]["ExecStart"].replace("%i", port))
        args = build_parser().parse_args(argv[1:])
        assert args.command == "serve"
        ports.append(args.port)
    assert ports == [8780, 8781]
    assert web["Service"]["Restart"] == "on-failure"
    for name, unit in (("web@", web), ("worker", _unit("sessionsearch-worker.service"))):
        assert "sessionsearch-migrate.service" in unit["Unit"]["After"].split(), name
        assert unit["Service"]["EnvironmentFile"] == "/etc/sessionsearch/env"
    assert "sessionsearch-migrate.service" in web["Unit"]["Wants"].split()


def test_the_postgres_env_example_selects_postgresql_with_known_settings():
    from sessionsearch.settings import SETTINGS, Settings
    from sessionsearch.store import backend_for
    from sessionsearch.store.postgres import PgBackend

    env = _env_file("env.postgres.example")
    settings = Settings.load(env=env)  # every value parses
    assert isinstance(backend_for(settings), PgBackend)  # builds no connection
    assert settings.database_pool_max_connections == 10
    known = {s.env for s in SETTINGS if s.env}
    named = set(re.findall(r"SESSIONSEARCH_[A-Z_]+", (DEPLOY / "env.postgres.example").read_text()))
    assert named <= known, named - known  # the commented-out ones too
    assert "SESSIONSEARCH_DATABASE_URL" not in _env_file("env.example")  # SQLite stays the plain shape
