"""MkDocs hooks (mkdocs.yml `hooks:`): fill each `<!-- generated: NAME [ARG] -->` marker of a page.

The renderers live in scripts/docs_reference.py and read the code's own tables (settings, metrics,
alert rules, the OpenAPI document, the CLI parser, `__all__`), so a reference page is rebuilt
from the code on every build. An unknown marker fails the build.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

HERE = Path(__file__).resolve().parent
for folder in (HERE, HERE.parent):  # docs_reference beside this file; the sessionsearch package
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import docs_reference  # noqa: E402

MARKER = re.compile(r"<!--\s*generated:\s*([a-z-]+)(?:\s+(\S+))?\s*-->")


def _render(match: re.Match, page: str) -> str:
    name, arg = match.group(1), match.group(2)
    try:
        if name == "alert":
            return docs_reference.alert_rule(arg)
        renderer = docs_reference.RENDERERS[name]
    except KeyError as exc:
        raise PluginError(f"{page}: unknown generated section {match.group(0)!r} ({exc})") from None
    return renderer()


def on_page_markdown(markdown: str, page, config, files) -> str:
    return MARKER.sub(lambda m: _render(m, page.file.src_path), markdown)
