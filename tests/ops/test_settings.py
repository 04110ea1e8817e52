"""The settings table: one declaration per setting, every environment variable in it, values checked."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from sessionsearch.cli import main
from sessionsearch.errors import InvalidRequest
from sessionsearch.settings import BY_NAME, DEPRECATED, SETTINGS, Settings

PACKAGE = Path(__file__).resolve().parents[2] / "sessionsearch"


def test_the_table_is_the_fields_of_settings_with_their_defaults():
    assert [s.name for s in SETTINGS] == [f.name for f in dataclasses.fields(Settings)]
    defaults = Settings()
    assert {s.name: getattr(defaults, s.name) for s in SETTINGS} == {s.name: s.default for s in SETTINGS}


def test_every_sessionsearch_environment_variable_the_package_names_is_a_setting():
    named = {}
    for path in PACKAGE.rglob("*.py"):
        for name in re.findall(r"SESSIONSEARCH_[A-Z_]+[A-Z]", path.read_text(encoding="utf-8")):
            named.setdefault(name, path.relative_to(PACKAGE).as_posix())
    assert len(named) >= 10, named  # the scan itself found the variables
    known = {s.env for s in SETTINGS if s.env}
    known.add("SESSIONSEARCH_WORKER_WRAPPER_PID")  # not a setting: the worker wrapper's pid, to its master
    known |= {env for env, _ in DEPRECATED.values()}  # read only to warn that they are ignored
    assert {name: where for name, where in named.items() if name not in known} == {}


def test_only_the_settings_module_reads_the_environment_for_a_setting():
    reads = re.compile(r"""(?:environ\.get\(|getenv\(|environ\[)\s*["']([A-Za-z_]+)["'](?!\]\s*=[^=])""")
    found = {}
    for path in PACKAGE.rglob("*.py"):
        for name in reads.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(path.relative_to(PACKAGE).as_posix())
    # prometheus_client's own variable, which it reads itself: processes set it for their children
    found.pop("PROMETHEUS_MULTIPROC_DIR", None)
    assert found == {}


def test_every_environment_variable_is_named_for_its_setting():
    names = {s.name: s.env for s in SETTINGS if s.env}
    assert names.pop("config_path") == "SESSIONSEARCH_CONFIG"  # the one named for its flag, --config
    assert {name: env for name, env in names.items() if env != f"SESSIONSEARCH_{name.upper()}"} == {}


def test_the_request_body_limit_is_a_setting_read_from_the_environment():
    assert Settings().max_body_bytes == 8 * 1024 * 1024
    assert Settings.load(env={"SESSIONSEARCH_MAX_BODY_BYTES": "2000"}).max_body_bytes == 2000


@pytest.mark.parametrize("raw", ["8M", "0", "-1"])
def test_a_request_body_limit_that_is_not_a_positive_whole_number_is_refused_naming_the_variable(raw):
    with pytest.raises(InvalidRequest) as caught:
        Settings.load(env={"SESSIONSEARCH_MAX_BODY_BYTES": raw})
    assert caught.value.message.startswith("SESSIONSEARCH_MAX_BODY_BYTES: must be")


def test_serve_with_a_bad_request_body_limit_exits_2_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SESSIONSEARCH_MAX_BODY_BYTES", "lots")
    assert main(["serve", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sessionsearch: SESSIONSEARCH_MAX_BODY_BYTES: must be a whole number of bytes")


def test_the_config_file_named_by_the_environment_is_read_and_recorded(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[search]\ntimeLimitMs = 1234\n')
    settings = Settings.load(env={"SESSIONSEARCH_CONFIG": str(path)})
    assert (settings.config_path, settings.search_time_limit_ms) == (str(path), 1234)
    flagged = Settings.load(config=str(path), env={"SESSIONSEARCH_CONFIG": str(tmp_path / "missing.toml")})
    assert flagged.config_path == str(path)  # the flag wins over the variable


def test_a_whole_number_in_the_toml_file_sets_the_postings_threshold(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[search]\npostingsMinDocs = 100\n")
    assert Settings.load(config=str(path), env={}).postings_min_docs == 100
    path.write_text('[search]\npostingsMinDocs = "many"\n')
    with pytest.raises(InvalidRequest, match="search.postingsMinDocs"):
        Settings.load(config=str(path), env={})


def test_the_database_url_is_kept_out_of_the_repr():
    url = "postgresql://u:pw-secret@h/db"
    assert "pw-secret" not in repr(Settings(database_url=url))
    assert BY_NAME["database_url"].env == "SESSIONSEARCH_DATABASE_URL"
