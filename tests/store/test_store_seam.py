"""The store is a seam: one interface (store/base.py) that every backend implements, nothing above
it that names a backend, opens a connection or writes SQL, and no import circle through the engine."""

import ast
import inspect
import re
from pathlib import Path

import pytest

import sessionsearch
from sessionsearch.store.base import AgentStore, Backend
from sessionsearch.store.postgres import PgAgentStore, PgBackend
from sessionsearch.store.sqlite import SqliteAgentStore
from sessionsearch.store.sqlite.backend import SqliteBackend


def _interface_methods(interface: type) -> dict[str, object]:
    """The methods the interface declares, its roles' included (store/base.py)."""
    return {name: value for klass in reversed(interface.__mro__) if klass.__module__ == "sessionsearch.store.base"
            for name, value in vars(klass).items() if callable(value) and not name.startswith("_")}


@pytest.mark.parametrize(("interface", "implementation", "some"), [
    (AgentStore, SqliteAgentStore, {"reader", "append", "search_top", "ping", "reconcile_tx"}),
    (Backend, SqliteBackend, {"agent_ids", "open_store", "check_ready", "agent_status"}),
    (AgentStore, PgAgentStore, {"reader", "append", "search_top", "ping", "reconcile_tx"}),
    (Backend, PgBackend, {"agent_ids", "open_store", "check_ready", "agent_status"}),
])
def test_each_backend_has_every_method_of_the_interface_with_its_parameters(interface, implementation, some):
    methods = _interface_methods(interface)
    assert some <= set(methods)
    for name, declared in methods.items():
        implemented = getattr(implementation, name, None)
        assert implemented is not None, name
        assert inspect.iscoroutinefunction(implemented) == inspect.iscoroutinefunction(declared), name
        want = [(p.name, p.kind, p.default is inspect.Parameter.empty)
                for p in inspect.signature(declared).parameters.values()]
        have = [(p.name, p.kind, p.default is inspect.Parameter.empty)
                for p in inspect.signature(implemented).parameters.values()]
        assert have == want, name


PACKAGE = Path(sessionsearch.__file__).parent
SQL = re.compile(r"\b(SELECT\b.*\bFROM|INSERT INTO|UPDATE \w+ SET|DELETE FROM|PRAGMA)\b")


def _modules_above_the_store() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if "store" not in p.relative_to(PACKAGE).parts[:1]]


def _imported(tree: ast.AST, path: Path) -> set[str]:
    """Absolute names of the modules a file imports, wherever the import statement is."""
    package = ["sessionsearch", *path.relative_to(PACKAGE).parent.parts]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
    return names


def _strings_but_docstrings(tree: ast.AST) -> list[str]:
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_nothing_above_the_store_names_a_backend_opens_a_database_or_writes_sql():
    modules = _modules_above_the_store()
    assert PACKAGE / "engine.py" in modules and PACKAGE / "search" / "runner.py" in modules
    for path in modules:
        tree = ast.parse(path.read_text())
        imported = _imported(tree, path)
        for banned in ("sqlite3", "aiosqlite", "sessionsearch.store.sqlite", "psycopg", "psycopg_pool",
                       "sessionsearch.store.postgres"):
            assert not any(name == banned or name.startswith(banned + ".") for name in imported), (path, banned)
        assert not [s for s in _strings_but_docstrings(tree) if SQL.search(s)], path


def test_search_indexer_and_store_never_import_the_engine():
    """They get what they need as arguments, so the engine is the only one importing them."""
    for folder in ("search", "indexer", "store"):
        paths = sorted((PACKAGE / folder).rglob("*.py"))
        assert paths, folder
        for path in paths:
            imported = _imported(ast.parse(path.read_text()), path)
            assert "sessionsearch.engine" not in imported, path
