"""The README's deployment shapes, run exactly as it gives them, in a fresh copy of the tree.

A newcomer copies a block from the README into a new shell in a fresh clone after `make install`.
Each test takes the block's text from README.md (or a getting-started page) and runs it in a
shell whose `PATH` holds nothing of the project's, in a copy of the tracked tree beside this
checkout's `.venv`. Only the user's own settings are adapted to the test machine: the copy's
`deploy/env.example` names this suite's Redis database and a free web port (what a user edits in
their `.env`), and the embedded shape gets its port from `SESSIONSEARCH_PORT`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..helpers import wait_until
from ..services import PG_ADMIN_URL, drop_pg_database, free_port, pg_url, require_postgres

ROOT = Path(__file__).resolve().parents[2]
# what a fresh login shell has: nothing of this checkout's virtualenv
BARE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
WORKER_METRICS_PORT = 9191  # the worker's default, which the Procfile keeps


def sh_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", markdown, flags=re.M | re.S)


def section(markdown: str, heading: str) -> str:
    """The text under a `## heading`, up to the next heading of that level."""
    start = markdown.index(f"\n## {heading}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start:end if end != -1 else None]


def readme_shape(label: str) -> str:
    """The first sh block after the shape's bold label in the README's "Three ways to run it"."""
    text = section((ROOT / "README.md").read_text(encoding="utf-8"), "Three ways to run it")
    return sh_blocks(text[text.index(f"**{label}**"):])[0]


def redis_page_block() -> str:
    """The block of the Redis getting-started page that runs both processes (`honcho start`)."""
    text = section((ROOT / "docs" / "getting-started" / "redis.md").read_text(encoding="utf-8"), "Run both")
    return next(b for b in sh_blocks(text) if "honcho start" in b)


def fresh_copy(dest: Path) -> Path:
    """The tree as a clone has it (tracked files, with this checkout's edits), beside this `.venv`."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    (dest / ".venv").symlink_to(ROOT / ".venv")  # what `make install` made
    return dest


def bare_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONSEARCH_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(PATH=BARE_PATH, **extra)
    return env


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


class Shell:
    """A block run by bash in its own process group, its output kept in a log."""

    def __init__(self, block: str, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log, self.cwd = log, cwd
        self.proc = subprocess.Popen(["bash", "-e", "-c", block], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def alive(self) -> bool:
        assert self.proc.poll() is None, f"the block ended with {self.proc.returncode}: {self.output()}"
        return True

    def stop(self) -> int:
        """Ctrl-C as a terminal sends it: SIGINT to the whole foreground group. Whatever the block
        started and left behind (honcho's children run in sessions of their own, and honcho can
        die in its own signal handler: "reentrant call" when the SIGINT lands mid-print) is killed
        after, so one failed stop never holds the next test's ports."""
        try:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGINT)
                try:
                    self.proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(30)
                    pytest.fail(f"the block did not stop on Ctrl-C: {self.output()}")
            return self.proc.returncode
        finally:
            kill_left_in(self.cwd)


def kill_left_in(root: Path) -> list[int]:
    """SIGKILL every process still running with its working directory in `root`; their pids."""
    root, killed = root.resolve(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue  # gone, or not ours to read
        if cwd == root or root in cwd.parents:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed


def wait_ready(shell: Shell, port: int, mode: str) -> None:
    def ready() -> bool:
        shell.alive()
        try:
            status, body = get(f"http://127.0.0.1:{port}/readyz")
        except OSError:
            return False
        return status == 200 and json.loads(body)["mode"] == mode

    wait_until(ready, 90, lambda: f"/readyz on :{port} in {mode} mode: {shell.output()}", every=0.2)


def wait_complete(shell: Shell, port: int) -> list[dict]:
    """Searches until the answers are complete and every agent's reconciliation is done."""
    agents: list[dict] = []

    def complete() -> bool:
        shell.alive()
        if post(f"http://127.0.0.1:{port}/v1/sessions.search", {"query": "loan"}).get("indexing"):
            return False
        agents[:] = post(f"http://127.0.0.1:{port}/v1/index.status", {})["agents"]
        return bool(agents) and all(a["backlog"] == 0 and a["completeness"] == 1.0 for a in agents)

    wait_until(complete, 90, lambda: f"the imported windows reconciled, {agents}: {shell.output()}", every=0.2)
    return agents


@contextlib.contextmanager
def worker_port_held() -> Iterator[None]:
    """The Procfile's worker binds a fixed port: one block at a time runs it, in every test process
    (and every checkout) on this machine."""
    with open(Path(tempfile.gettempdir()) / f"sessionsearch-test-port-{WORKER_METRICS_PORT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no owner
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_the_readme_and_the_redis_page_give_the_same_service_shape():
    assert readme_shape("Service with Redis") == redis_page_block()


def test_the_readme_has_no_link_outside_the_repository_and_stays_short():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target.split("#")[0]).exists(), target  # inside the clone, and there
    assert "../" not in text


def test_a_dot_env_with_the_token_is_never_committed():
    for name in (".env", ".env.local"):
        assert subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT).returncode == 0, name
    for name in ("deploy/env.example", "deploy/env.postgres.example"):
        assert subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT).returncode == 1, name


def test_the_embedded_shape_runs_from_the_readme_in_a_fresh_clone(tmp_path):
    block = readme_shape("Embedded")
    clone = fresh_copy(tmp_path / "clone")
    port = free_port()
    shell = Shell(block, clone, bare_env(SESSIONSEARCH_PORT=str(port)), tmp_path / "shell.log")
    try:
        wait_ready(shell, port, "embedded")
        agents = wait_complete(shell, port)  # the sample the block imported, reconciled on the server's thread
        assert {a["agentId"] for a in agents} == {"main", "work_bot"}
        assert get(f"http://127.0.0.1:{port}/ui")[0] == 200
    finally:
        assert shell.stop() in (0, 130), shell.output()
    assert (clone / "data" / "agents").is_dir()


def run_honcho_block(block: str, tmp_path: Path, redis_url: str, store: dict[str, str] | None = None,
                     **env: str) -> Path:
    """Run a block ending in `honcho start` in a fresh copy; the demo sample, imported beside the
    running pair (into `store`, the settings naming the block's store), must be reconciled by the
    worker through Redis; Ctrl-C must stop both cleanly."""
    assert "honcho start" in block and "cp deploy/env.example .env" in block
    clone = fresh_copy(tmp_path / "clone")
    port = free_port()
    example = clone / "deploy" / "env.example"
    settings = example.read_text()
    for name, value in (("SESSIONSEARCH_REDIS_URL", redis_url), ("SESSIONSEARCH_PORT", str(port))):
        settings, n = re.subn(rf"^{name}=.*$", f"{name}={value}", settings, flags=re.M)
        assert n == 1, name
    example.write_text(settings)
    with worker_port_held():
        return _run_honcho(block, clone, port, tmp_path, store, env)


def _run_honcho(block: str, clone: Path, port: int, tmp_path: Path, store: dict[str, str] | None,
                env: dict[str, str]) -> Path:
    assert port_free(WORKER_METRICS_PORT), f"port {WORKER_METRICS_PORT} is taken: the Procfile's worker binds it"
    shell = Shell(block, clone, bare_env(**env), tmp_path / "shell.log")
    try:
        wait_ready(shell, port, "redis")  # web, which found sessionsearch on the PATH the block set

        def worker_up() -> bool:
            shell.alive()
            try:
                return get(f"http://127.0.0.1:{WORKER_METRICS_PORT}/metrics")[0] == 200
            except OSError:
                return False

        wait_until(worker_up, 90, lambda: f"the worker's /metrics: {shell.output()}", every=0.2)
        # imported as the pair runs, into the store the block chose: the first search enqueues
        imported = subprocess.run([sys.executable, "-m", "sessionsearch.cli", "import", "sessionsearch/demo_data"],
                                  cwd=clone, env={**bare_env(**env), "SESSIONSEARCH_DATA_DIR": str(clone / "data"),
                                                  **(store or {})},
                                  capture_output=True, text=True, timeout=120)
        assert imported.returncode == 0, imported.stderr
        assert post(f"http://127.0.0.1:{port}/v1/sessions.search", {"query": "loan"})["indexing"] is True
        agents = wait_complete(shell, port)
        assert {a["agentId"] for a in agents} == {"main", "work_bot"}
    finally:
        shell.stop()
    log = shell.log.read_text(errors="replace")
    assert "not found" not in log
    for process in ("web.1", "worker.1"):  # both ran until honcho stopped them
        assert re.search(rf"{process} stopped \(rc=", log), log[-4000:]
    events = {}  # each process's own last word: the web closed its stores, the worker's wrapper exited 0
    for line in log.splitlines():
        name, _, rest = line.partition(" | ")
        try:
            entry = json.loads(rest)
        except ValueError:
            continue  # honcho's own lines, and anything a library prints
        if isinstance(entry, dict) and "event" in entry:
            events[(name.split()[-1], entry["event"])] = entry
    assert ("web.1", "api.stopped") in events, log[-4000:]
    assert events[("worker.1", "worker.exited")]["code"] == 0, log[-4000:]
    return clone


def test_the_service_shape_runs_web_and_worker_from_the_readme_in_a_fresh_clone(tmp_path, redis_url):
    # the Redis page's block is the same (the test above)
    clone = run_honcho_block(readme_shape("Service with Redis"), tmp_path, redis_url)
    assert list((clone / "data" / "agents").rglob("*.db"))  # the data dir the copied .env names, in the clone


def test_the_postgresql_shape_runs_from_the_readme_in_a_fresh_clone(tmp_path, redis_url):
    """The block names its database, `sessionsearch`; the test's libpq environment (PGHOST, PGPORT,
    PGUSER) points `createdb` and the URL at the suite's server, as a user's own defaults would."""
    import psycopg

    block = readme_shape("Scale-out with PostgreSQL")
    match = re.search(r"createdb (\w+)", block)
    assert match and f"postgresql:///{match.group(1)}" in block
    name = match.group(1)
    admin = urllib.parse.urlsplit(PG_ADMIN_URL)
    with require_postgres() as conn:
        taken = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    assert not taken, (f"a database named {name} is on {admin.hostname}:{admin.port}: the README's block creates "
                       "it (drop it, or set SESSIONSEARCH_TEST_PG_URL to another server)")
    try:
        clone = run_honcho_block(block, tmp_path, redis_url, {"SESSIONSEARCH_DATABASE_URL": f"postgresql:///{name}"},
                                 PGHOST=admin.hostname or "127.0.0.1",
                                 PGPORT=str(admin.port or 5432), PGUSER=admin.username or "postgres")
        with psycopg.connect(pg_url(name)) as conn:  # the transcripts are in PostgreSQL, none under ./data
            assert conn.execute("SELECT count(*) FROM ss_events").fetchone()[0] > 0
        assert not list((clone / "data").rglob("*.db"))
    finally:
        drop_pg_database(pg_url(name))
