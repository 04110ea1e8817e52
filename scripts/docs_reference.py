"""Reference sections of the docs site, rendered from the code's own tables so they cannot drift.

Each function returns Markdown for one `<!-- generated: NAME -->` marker (scripts/docs_hooks.py):
the settings from `sessionsearch.settings.SETTINGS`, the metrics from the objects of
`sessionsearch/metrics.py`, the alert rules from `deploy/prometheus/alerts.yml`, the HTTP API from
the OpenAPI document `/openapi.json` serves, the CLI from its argparse parser, and the Python API
from `sessionsearch.__all__`.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent


def cell(text: Any) -> str:
    """Text made safe for one Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(text: Any) -> str:
    return f"`{text}`" if text not in (None, "") else ""


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# --- settings -------------------------------------------------------------------------------

def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, tuple):
        return code("[]") if not value else code(json.dumps(list(value)))
    return code(value)


def settings() -> str:
    from sessionsearch.settings import SETTINGS

    rows = [[code(s.name), code(s.env) or "—", code(s.toml) or "—", _default(s.default), s.help]
            for s in SETTINGS]
    return table(["setting", "environment", "TOML (`--config`)", "default", "what it does"], rows)


# --- metrics and alerts -----------------------------------------------------------------------

def metric_families() -> list[dict[str, Any]]:
    """Every `sessionsearch_*` family the code exports: name as scraped, type, help, labels."""
    from prometheus_client import CollectorRegistry

    from sessionsearch import metrics

    families = []
    for obj in vars(metrics.get()).values():
        if not hasattr(obj, "_labelnames"):
            continue  # not a metric object
        suffix = "_total" if obj._type == "counter" else ""
        families.append({"name": obj._name + suffix, "type": obj._type, "help": obj._documentation,
                         "labels": list(obj._labelnames)})
    status = defaultdict(int)  # one agent with nothing stored: every family, with its labels
    collector = metrics.PipelineCollector(lambda: [("main", status)], lambda: {"default": 0})
    CollectorRegistry().register(collector)  # what the web process does: the collector must register
    for family in collector.collect():
        labels = sorted({k for sample in family.samples for k in sample.labels})
        families.append({"name": family.name, "type": family.type, "help": family.documentation,
                         "labels": labels})
    return sorted(families, key=lambda f: f["name"])


def metrics_table() -> str:
    rows = [[code(f["name"]), f["type"], ", ".join(code(label) for label in f["labels"]) or "—", f["help"]]
            for f in metric_families()]
    return table(["metric", "type", "labels", "help"], rows)


def alert_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"] if "alert" in rule]


def alerts_table() -> str:
    rows = [[f"[{r['alert']}](#{r['alert'].lower()})", r.get("labels", {}).get("severity", ""),
             r.get("for", "—"), r["annotations"]["summary"].replace("{{ $labels.agent }}", "*agent*")]
            for r in alert_rules()]
    return table(["alert", "severity", "for", "summary"], rows)


def alert_rule(name: str) -> str:
    """One rule as deployed: its expression and how long it must hold."""
    rule = next((r for r in alert_rules() if r["alert"] == name), None)
    if rule is None:
        raise KeyError(f"no alert {name!r} in deploy/prometheus/alerts.yml")
    severity = rule.get("labels", {}).get("severity", "")
    return (f"*Severity {severity}, fires after {rule.get('for', '0m')}.* "
            f"{rule['annotations']['description']}\n\n```promql\n{rule['expr'].strip()}\n```\n")


# --- HTTP API ---------------------------------------------------------------------------------

def _schema_type(schema: dict[str, Any]) -> str:
    """A short reading of a JSON schema: `string ≤512`, `integer 1..25 or null`, `one of …`."""
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    if "enum" in schema:
        return "one of " + ", ".join(code(json.dumps(v)) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts = []
            for option in schema[key]:
                text = _schema_type(option)
                if text not in parts:
                    parts.append(text)
            return " or ".join(parts)
    kind = schema.get("type", "object" if "properties" in schema else "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        items = schema.get("items", {})
        bounds = _bounds(schema, "minItems", "maxItems")
        return f"array{bounds} of {_schema_type(items)}"
    if kind == "object" and "properties" in schema:
        return "object (" + ", ".join(code(p) for p in schema["properties"]) + ")"
    if kind in ("integer", "number"):
        return kind + _bounds(schema, "minimum", "maximum")
    if kind == "string":
        return kind + _bounds(schema, "minLength", "maxLength")
    return kind


def _bounds(schema: dict[str, Any], low: str, high: str) -> str:
    lo, hi = schema.get(low), schema.get(high)
    if lo is not None and hi is not None:
        return f" {lo}..{hi}"
    if hi is not None:
        return f" ≤{hi}"
    if lo is not None and lo > 0:
        return f" ≥{lo}"
    return ""


def _description(schema: dict[str, Any]) -> str:
    if "description" in schema:
        return schema["description"]
    options = schema.get("anyOf") or schema.get("oneOf") or []
    return next((o["description"] for o in options if "description" in o), "")


def _fields(schema: dict[str, Any]) -> str:
    properties = schema.get("properties", {})
    if not properties:
        return (schema.get("description", "any JSON object") + "\n").capitalize()
    required = set(schema.get("required", []))
    rows = [[code(name), "yes" if name in required else "", _schema_type(sub), _description(sub)]
            for name, sub in properties.items()]
    text = table(["field", "required", "type", "notes"], rows)
    if "oneOf" in schema and all("required" in o for o in schema["oneOf"]):
        names = " or ".join(code(o["required"][0]) for o in schema["oneOf"])
        text += f"\nExactly one of {names}.\n"
    return text


def _response_fields(schema: dict[str, Any]) -> str:
    if "oneOf" in schema or "anyOf" in schema:
        options = schema.get("oneOf") or schema.get("anyOf")
        return "\n".join(f"One shape:\n\n{_fields(option)}" for option in options)
    return _fields(schema)


def http_api() -> str:
    from sessionsearch.api.openapi import openapi_document

    document = openapi_document(token=True)
    out = []
    for path, operations in document["paths"].items():
        for verb, op in operations.items():
            out.append(f"### `{verb.upper()} {path}`\n")
            if op.get("description"):
                out.append(op["description"] + "\n")
            body = op.get("requestBody")
            if body:
                schema = body["content"]["application/json"]["schema"]
                out.append(f"**Request body** ({'required' if body['required'] else 'optional; empty reads as `{}`'}):\n")
                out.append(_fields(schema))
            ok = op["responses"].get("200", {})
            content = ok.get("content", {})
            if "application/json" in content:
                out.append("**Answer 200**:\n")
                out.append(_response_fields(content["application/json"]["schema"]))
            elif "text/plain" in content:
                out.append(f"**Answer 200**: {ok['description']}.\n")
            errors = [f"{code(status)} {r['description']}" for status, r in op["responses"].items() if status != "200"]
            if errors:
                out.append("**Errors**: " + "; ".join(errors) + ".\n")
            schemas = {"request": body["content"]["application/json"]["schema"]} if body else {}
            schemas["answer"] = content.get("application/json", {}).get("schema")
            if any(schemas.values()):
                dumped = json.dumps({k: v for k, v in schemas.items() if v}, indent=2, ensure_ascii=False)
                out.append('??? note "JSON schema"\n\n    ```text\n'
                           + "\n".join("    " + line for line in dumped.splitlines()) + "\n    ```\n")
    return "\n".join(out)


# --- CLI --------------------------------------------------------------------------------------

def cli() -> str:
    from sessionsearch.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; the page should not depend on it
    try:
        parser = build_parser()
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        helps = {a.dest: a.help for a in sub._choices_actions}
        out = []
        for name, command in sub.choices.items():
            out.append(f"### `sessionsearch {name}`\n\n{helps.get(name, '')}\n\n```text\n"
                       f"{command.format_help().rstrip()}\n```\n")
        return "\n".join(out)
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


# --- Python API -------------------------------------------------------------------------------

def _doc(obj: Any) -> str:
    text = inspect.getdoc(obj) or ""
    return re.sub(r"\n(?=\S)", " ", text.split("\n\n")[0]) if text else ""


# Engine methods named after an HTTP method (the docstring says more where there is one)
OPERATIONS = {"upsert_session": "sessions.upsert", "append": "transcript.append", "rotate": "sessions.rotate",
              "delete": "sessions.delete", "archive": "sessions.archive", "restore": "sessions.restore",
              "search": "sessions.search", "history": "sessions.history", "list_sessions": "sessions.list",
              "index_status": "index.status", "call": "any HTTP method by name, with its JSON body",
              "open": "open the data dir (or use `async with Engine(…) as engine`)",
              "close": "close every database and the in-process worker"}


def _methods_table(methods: dict[str, Any], names: list[str]) -> str:
    rows = []
    for method in names:
        function = methods[method]
        prefix = "await " if inspect.iscoroutinefunction(function) else ""
        signature = str(inspect.signature(function)).replace("(self, ", "(").replace("(self)", "()")
        signature = re.sub(r"\s*->.*$", "", signature).replace("'", "")
        shown = f"{function.__self__.__name__}.{method}" if inspect.ismethod(function) else method  # classmethod
        text = _doc(function)
        if not text and method in OPERATIONS:
            twin = OPERATIONS[method]
            text = f"`{twin}`" if "." in twin else twin
        rows.append([f"`{prefix}{shown}{signature}`", text])
    return table(["method", "what it does"], rows)


def python_api() -> str:
    import sessionsearch
    from sessionsearch.errors import SessionSearchError
    from sessionsearch.protocol import METHODS, Params

    out = []
    for name in sessionsearch.__all__:
        obj = getattr(sessionsearch, name)
        if isinstance(obj, type) and issubclass(obj, SessionSearchError):
            continue
        if isinstance(obj, type) and issubclass(obj, Params):
            methods = ", ".join(f"`{m.name}`" for m in METHODS.values() if m.params is obj)
            out.append(f"### `{name}`\n\n{_doc(obj)} The request of {methods}: built with the wire's field names "
                       f"(`{name}(sessionKey=...)`) or from a wire body (`{name}.of(body)`), checked as HTTP checks "
                       "it.\n")
            out.append(table(["field", "attribute", "meaning"],
                             [[code(f.alias or a), code(a), f.description or ""] for a, f in obj.model_fields.items()]))
            continue
        if inspect.isclass(obj):
            out.append(f"### `{name}`\n\n{_doc(obj)}\n")
            methods = {m: getattr(obj, m) for m, f in vars(obj).items()
                       if not m.startswith("_") and (callable(f) or isinstance(f, classmethod))}
            operations = [m for m in methods if m in OPERATIONS]
            if operations:
                out.append(_methods_table(methods, operations))
                rest = [m for m in methods if m not in operations]
                out.append("Also public, for the worker and the HTTP layer:\n")
                out.append(_methods_table(methods, rest))
            elif methods:
                out.append(_methods_table(methods, list(methods)))
        else:
            out.append(f"### `{name}`\n\nA {type(obj).__name__} of {len(obj)} `Setting` records (name, default, "
                       "help, env, toml): every setting, as the [Configuration](../reference/configuration.md) page lists them.\n")
    errors = [getattr(sessionsearch, n) for n in sessionsearch.__all__]
    errors = [e for e in errors if isinstance(e, type) and issubclass(e, SessionSearchError)]
    out.append("### Errors\n")
    out.append(errors_table(errors))
    return "\n".join(out)


def errors_table(errors: list[type] | None = None) -> str:
    from sessionsearch import errors as tree
    from sessionsearch.api.app import STATUS

    if errors is None:  # the public ones, and those the HTTP layer answers with a code of their own
        import sessionsearch
        errors = [c for c in vars(tree).values() if isinstance(c, type) and issubclass(c, tree.SessionSearchError)
                  and (c.__name__ in sessionsearch.__all__ or c in STATUS)]
    rows = []
    for cls in errors:
        status = next((s for c, s in STATUS.items() if issubclass(cls, c)), 500)
        rows.append([code(cls.__name__), code(cls.__mro__[1].__name__), code(cls.code), status, _doc(cls)])
    return table(["exception", "is a", "code", "HTTP", "raised when"], rows)


# --- migrations -------------------------------------------------------------------------------

def migrations() -> str:
    from sessionsearch.store.sqlite.migrations import MIGRATIONS

    rows = [[number, code(name)] for number, name, _ in MIGRATIONS]
    return table(["number", "name"], rows)


RENDERERS = {
    "migrations": migrations,
    "settings": settings,
    "metrics": metrics_table,
    "alerts": alerts_table,
    "http-api": http_api,
    "cli": cli,
    "python-api": python_api,
    "errors": errors_table,
}
