"""The docs site builds with `mkdocs build --strict`, and its generated pages name all the code has."""

from __future__ import annotations

import html
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sessionsearch.api.openapi import openapi_document
from sessionsearch.cli import build_parser
from sessionsearch.settings import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def build(config_dir: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=config_dir, env=ENV, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = build(ROOT, out)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    return out


def page(site: Path, name: str) -> str:
    """The page's text, tags dropped and entities decoded (names in code spans read as written)."""
    raw = (site / name / "index.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def whole_site(site: Path) -> str:
    return "\n".join(html.unescape(re.sub(r"<[^>]+>", "", p.read_text(encoding="utf-8")))
                     for p in site.rglob("*.html"))


def test_every_setting_with_its_environment_variable_and_toml_path_is_on_the_configuration_page(site):
    text = page(site, "reference/configuration")
    for s in SETTINGS:
        for name in (s.name, s.env, s.toml):
            if name:
                assert name in text, f"{name} ({s.name}) is missing from the configuration page"


def test_every_setting_name_appears_in_the_built_site(site):
    text = whole_site(site)
    assert [s.name for s in SETTINGS if s.name not in text] == []


def test_every_metric_named_in_the_code_is_on_the_metrics_page(site):
    names = set()  # every metric constructed anywhere in the package, found without the docs' generator
    made = re.compile(r'(?:Counter|Gauge|Histogram|Summary|Info|Enum)(?:MetricFamily)?\(\s*"(sessionsearch_[a-z_]+)"')
    for path in (ROOT / "sessionsearch").rglob("*.py"):
        names |= set(made.findall(path.read_text(encoding="utf-8")))
    assert len(names) >= 15, names  # the scan itself found the metrics
    text = page(site, "operations/metrics")
    assert sorted(n for n in names if n not in text) == []


def test_every_alert_rule_has_a_section_saying_what_to_do(site):
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    names = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    raw = (site / "operations" / "metrics" / "index.html").read_text(encoding="utf-8")
    for name in names:
        assert f'id="{name.lower()}"' in raw, f"no section for alert {name}"
    section = page(site, "operations/metrics").split("SessionsearchBacklogNotDraining")[-1]
    assert "What to do" in section


def test_every_route_of_the_openapi_document_is_in_the_http_api_reference(site):
    text = page(site, "reference/http-api")
    paths = openapi_document()["paths"]
    assert len(paths) >= 14
    assert [p for p in paths if p not in text] == []
    # fields come from the same document: a request field and an answer field of sessions.search
    assert "resultMode" in text and "archivedTranscriptsExcluded" in text


def test_every_cli_subcommand_is_in_the_cli_reference(site):
    text = page(site, "reference/cli")
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    assert [c for c in sub.choices if f"sessionsearch {c}" not in text] == []
    assert "--cpu-priority" in text


def test_a_broken_link_fails_the_strict_build(tmp_path):
    shutil.copy(ROOT / "mkdocs.yml", tmp_path)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    with open(tmp_path / "docs" / "index.md", "a", encoding="utf-8") as fh:
        fh.write("\nSee [nowhere](no-such-page.md).\n")
    result = build(tmp_path, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


def test_the_plots_are_redrawn_from_the_saved_json_and_name_what_is_missing(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(ROOT / "bench" / "results", results)
    for extra in [*results.glob("search-*.json"), *results.glob("pg-*.json")]:
        extra.unlink()  # leave one corpus size a store: the growth plot must say which are missing
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "plots.py"), "--results", str(results),
                             "--out", str(tmp_path / "img")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    drawn = sorted(p.name for p in (tmp_path / "img").glob("*.png"))
    assert drawn == ["agents-growth.png", "fresh-ingest.png", "http.png", "readers.png", "search-classes.png",
                     "search-growth.png", "throughput.png"]
    for path in (tmp_path / "img").glob("*.png"):
        width, height = png_size(path)
        assert width > 400 and height > 200
    assert "SQLite: no run yet at 100,000, 200,000, 500,000 messages" in result.stderr
    assert "PostgreSQL: no run yet at 100,000, 200,000, 500,000 messages" in result.stderr
    # the docs show the PNGs the script writes
    performance = (ROOT / "docs" / "performance" / "index.md").read_text()
    assert all(f"../img/{name}" in performance for name in drawn)
