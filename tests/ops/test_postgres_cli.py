"""Choosing the store from the command line: --database-url / SESSIONSEARCH_DATABASE_URL / TOML
database.url, `sessionsearch migrate`, the schema version in `status`, and a URL's password never
shown, all through the real CLI against real PostgreSQL and SQLite."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from sessionsearch.cli import build_parser
from sessionsearch.store.postgres.migrate import LATEST as PG_LATEST
from sessionsearch.store.sqlite.migrations import MIGRATIONS as SQLITE_MIGRATIONS

from ..postgres import scratch_database
from ..server import Server

DEMO = Path(__file__).resolve().parents[2] / "sessionsearch" / "demo_data"
SECRET = "pw-Never-Shown-7"


def cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    environment.update(SESSIONSEARCH_DATA_DIR=str(cwd / "data"), **env)
    return subprocess.run([sys.executable, "-m", "sessionsearch.cli", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=120)


def with_password(url: str) -> str:
    """The URL with a password in it (the test server trusts loopback, so any password connects)."""
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")


@pytest.fixture
def database():
    with scratch_database("pgops") as url:
        yield url


def test_every_command_takes_a_database_url():
    parser = build_parser()
    extra = {"search": ["word"], "history": ["agent:main:main"], "import": ["dir"]}
    for command in ("serve", "worker", "import", "search", "history", "status", "reconcile", "optimize", "migrate",
                    "demo", "mcp"):
        args = parser.parse_args([command, *extra.get(command, []), "--database-url", "postgresql://h/db"])
        assert args.database_url == "postgresql://h/db", command


async def test_mcp_with_a_database_url_serves_the_tools_from_postgresql(tmp_path, database):
    assert cli("import", str(DEMO), "--database-url", database, cwd=tmp_path).returncode == 0
    assert cli("reconcile", "--database-url", database, cwd=tmp_path).returncode == 0
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSEARCH_")}
    params = StdioServerParameters(command=sys.executable, env=environment, cwd=str(tmp_path), args=[
        "-m", "sessionsearch.cli", "mcp", "--data-dir", str(tmp_path / "data"), "--database-url", database])
    with open(tmp_path / "mcp.log", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            result = await client.call_tool("sessions_search", {"query": "loan"})
    found = json.loads(result.content[0].text)
    assert not result.is_error and "indexing" not in found, found
    assert {hit["sessionKey"].split(":")[1] for hit in found["results"]} == {"main"}  # the demo's loan talk
    assert not (tmp_path / "data" / "agents").exists()  # nothing read from (or made in) SQLite files
    assert "Traceback" not in (tmp_path / "mcp.log").read_text()


def test_migrate_brings_a_new_database_to_the_latest_schema_then_finds_it_current(tmp_path, database):
    first = cli("migrate", "--database-url", database, "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"store": "postgresql", "latest": PG_LATEST, "databases": [
        {"database": database, "from": 0, "to": PG_LATEST}]}
    again = cli("migrate", cwd=tmp_path, SESSIONSEARCH_DATABASE_URL=database)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"{database}: schema version {PG_LATEST} (already current)\n"


def test_status_names_the_store_and_its_schema_version(tmp_path, database):
    assert cli("import", str(DEMO), "--database-url", database, cwd=tmp_path).returncode == 0
    status = json.loads(cli("status", "--json", "--database-url", database, cwd=tmp_path).stdout)
    assert status["schema"] == {"store": "postgresql", "database": f"PostgreSQL {database}",
                                "version": PG_LATEST, "latest": PG_LATEST}
    assert {a["agentId"] for a in status["agents"]} == {"main", "work_bot"}
    human = cli("status", "--database-url", database, cwd=tmp_path).stdout
    assert f"schema: version {PG_LATEST} of {PG_LATEST} (PostgreSQL {database})" in human


def test_the_toml_database_url_selects_postgresql_and_the_flag_overrides_it(tmp_path, database):
    (tmp_path / "config.toml").write_text(f'[database]\nurl = "{database}"\n')
    imported = cli("import", str(DEMO), "--config", "config.toml", "--json", cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert not (tmp_path / "data" / "agents").exists()  # nothing went to SQLite files
    found = json.loads(cli("reconcile", "--config", "config.toml", "--json", cwd=tmp_path).stdout)
    assert found["outcomes"]["published"] == 6
    hits = json.loads(cli("search", "loan", "--config", "config.toml", "--json", cwd=tmp_path).stdout)
    assert hits["results"] and "indexing" not in hits
    with scratch_database("pgops_flag") as other:  # the flag wins over the file: an empty database
        empty = json.loads(cli("status", "--config", "config.toml", "--database-url", other, "--json",
                               cwd=tmp_path).stdout)
        assert empty["agents"] == []


def test_a_url_of_another_scheme_is_refused_with_a_clear_error(tmp_path):
    run = cli("status", cwd=tmp_path, SESSIONSEARCH_DATABASE_URL=f"mysql://app:{SECRET}@db/app")
    assert run.returncode == 2
    assert run.stderr == ("sessionsearch: database_url mysql://app:***@db/app has 'mysql': only PostgreSQL is "
                              "supported (postgresql://user:password@host:5432/dbname); leave it unset to keep "
                          "SQLite files under the data dir\n")
    run = cli("search", "x", "--json", "--database-url", "sqlite:///tmp/x.db", cwd=tmp_path)
    assert json.loads(run.stdout)["error"]["code"] == "INVALID_REQUEST"
    assert "'sqlite': only PostgreSQL is supported" in json.loads(run.stdout)["error"]["message"]


def test_the_password_of_the_url_is_never_printed_or_logged(tmp_path, database):
    url = with_password(database)
    runs = [cli("migrate", "--database-url", url, cwd=tmp_path),
            cli("import", str(DEMO), "--database-url", url, cwd=tmp_path),
            cli("status", "--database-url", url, cwd=tmp_path),
            cli("status", "--json", cwd=tmp_path, SESSIONSEARCH_DATABASE_URL=url),
            cli("search", "loan", "--database-url", url, cwd=tmp_path)]
    down = url.replace(":5432/", ":9/")  # nothing listens there: the error must not echo it either
    runs += [cli("status", "--database-url", down, cwd=tmp_path), cli("migrate", "--json", "--database-url", down,
                                                                      cwd=tmp_path)]
    for run in runs[:5]:
        assert run.returncode == 0, run.stderr
    for run in runs[5:]:
        assert run.returncode == 2 and "PostgreSQL is unavailable" in run.stdout + run.stderr
    assert "postgres:***@" in runs[0].stdout + runs[2].stdout
    for run in runs:
        assert SECRET not in run.stdout + run.stderr
    web = Server(tmp_path / "data", tmp_path / "web.log", "--database-url", url)
    try:
        assert web.post("sessions.search", {"query": "loan"})[0] == 200
    finally:
        assert web.stop() == 0
    log = (tmp_path / "web.log").read_text()
    assert '"store": "PostgreSQL postgresql://postgres:***@' in log and SECRET not in log


def test_migrate_on_sqlite_brings_every_agent_database_under_the_data_dir_current(tmp_path):
    assert cli("import", str(DEMO), cwd=tmp_path).returncode == 0
    old = tmp_path / "data" / "agents" / "old.db"  # an agent database at schema version 1
    conn = sqlite3.connect(old)
    conn.executescript(SQLITE_MIGRATIONS[0][2])
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                 "applied_at INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_migrations VALUES (1, ?, 0)", (SQLITE_MIGRATIONS[0][1],))
    conn.commit()
    conn.close()
    latest = SQLITE_MIGRATIONS[-1][0]
    run = cli("migrate", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    done = {Path(d["database"]).name: (d["from"], d["to"]) for d in json.loads(run.stdout)["databases"]}
    assert done == {"main.db": (latest, latest), "work_bot.db": (latest, latest), "old.db": (1, latest)}
    status = json.loads(cli("status", "--json", cwd=tmp_path).stdout)
    assert status["schema"]["version"] == latest and status["schema"]["store"] == "sqlite"


def test_redaction_hides_passwords_in_the_user_part_and_in_parameters():
    from sessionsearch.store import redact

    assert redact("postgresql://app:s3cr%40t@db:5432/x?sslmode=require&password=two") == \
        "postgresql://app:***@db:5432/x?sslmode=require&password=***"
    assert redact("postgresql://app@db/x") == "postgresql://app@db/x"
    assert redact("postgresql://[::1/x:pw") == "postgresql://***"  # unparsable: nothing of it echoed
