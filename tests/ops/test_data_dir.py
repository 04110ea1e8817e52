"""The data dir a command names: a read of one that is not there is refused (never created empty),
and one that cannot be created is a one-line error naming the path and the OS reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

KEY = "agent:main:main"
READS = [("search", "loan"), ("history", KEY), ("status",), ("reconcile",), ("optimize",)]


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    environment.update(env)
    return subprocess.run([sys.executable, "-m", "sessionsearch.cli", *args], capture_output=True, text=True,
                          env=environment, timeout=120)


def one_line_error(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr and run.stdout == "", run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sessionsearch: "), run.stderr
    return lines[0]


@pytest.mark.parametrize("command", READS, ids=[c[0] for c in READS])
def test_a_command_that_reads_a_missing_data_dir_says_so_and_creates_nothing(tmp_path, command):
    missing = tmp_path / "mistyped"
    line = one_line_error(cli(command[0], "--data-dir", str(missing), *command[1:]))
    assert line == (f"sessionsearch: no data dir at {missing} (--data-dir or SESSIONSEARCH_DATA_DIR): check the "
                    "path, or create one with `sessionsearch import` or `sessionsearch serve`")
    assert not missing.exists()


def test_the_environment_variable_is_checked_as_the_flag_is_and_json_output_gets_the_error_as_json(tmp_path):
    missing = tmp_path / "mistyped"
    run = cli("search", "--json", "loan", SESSIONSEARCH_DATA_DIR=str(missing))
    assert run.returncode == 2 and run.stderr == "", run.stderr
    error = json.loads(run.stdout)["error"]
    assert error["code"] == "INVALID_REQUEST" and error["message"].startswith(f"no data dir at {missing} ")
    assert not missing.exists()


def test_a_data_dir_that_exists_though_empty_is_searched(tmp_path):
    run = cli("search", "--data-dir", str(tmp_path), "loan")
    assert run.returncode == 0 and "no matches" in run.stdout, (run.stdout, run.stderr)


@pytest.mark.parametrize("command", [("serve",), ("import", "."), ("worker", "--redis-url", "redis://127.0.0.1:9/0"),
                                     ("mcp",)], ids=["serve", "import", "worker", "mcp"])
def test_a_data_dir_that_cannot_be_created_is_a_one_line_error_with_the_os_reason(tmp_path, command):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for path, reason in ((a_file / "data", "Not a directory"), ("/proc/sessionsearch-data", "No such file or directory")):
        line = one_line_error(cli(command[0], "--data-dir", str(path), *command[1:]))
        assert line == (f"sessionsearch: cannot create the data dir {path} (--data-dir or SESSIONSEARCH_DATA_DIR): "
                        f"{reason}")


def test_the_postgresql_shape_needs_no_data_dir(tmp_path, pg):
    missing = tmp_path / "never-made"
    run = cli("search", "--data-dir", str(missing), "loan", SESSIONSEARCH_DATABASE_URL=pg.database_url)
    assert run.returncode == 0 and "no matches" in run.stdout, (run.stdout, run.stderr)
    assert not missing.exists()
