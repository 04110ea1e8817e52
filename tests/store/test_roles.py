"""Each backend plays every role of the store's seam (store/base.py), method by method: a method
missing, or its parameters drifting from the role's declaration (names, kinds, defaults, sync or
async), fails here before it fails a caller (mypy checks the types)."""

import inspect
import re

import pytest

from sessionsearch.store import base
from sessionsearch.store.postgres import PgAgentStore, PgBackend
from sessionsearch.store.sqlite import SqliteAgentStore
from sessionsearch.store.sqlite.backend import SqliteBackend

STORE_ROLES = [base.SessionWrites, base.TranscriptReads, base.SearchReads, base.Maintenance]
BACKEND_ROLES = [base.ManySearch, base.Backend]
STORES = [SqliteAgentStore, PgAgentStore]
BACKENDS = [SqliteBackend, PgBackend]


def _declared(role: type) -> tuple[dict[str, object], set[str]]:
    """A role's methods and attributes, with those of the roles it extends."""
    methods: dict[str, object] = {}
    attributes: set[str] = set()
    for klass in reversed(role.__mro__):
        if klass.__module__ != base.__name__:
            continue
        attributes.update(getattr(klass, "__annotations__", {}))
        methods.update((name, value) for name, value in vars(klass).items()
                       if callable(value) and not name.startswith("_"))
    return methods, attributes


def _shape(function: object) -> list[tuple[str, object, object]]:
    """Each parameter's name, kind and default (a role's `...` default: any default)."""
    return [(p.name, p.kind, "any" if p.default is Ellipsis else p.default)
            for p in inspect.signature(function).parameters.values()]


def _has_attribute(implementation: type, name: str) -> bool:
    """A class attribute, an annotated one, or one its methods assign (`self.name = …`)."""
    if any(name in vars(k) or name in getattr(k, "__annotations__", {}) for k in implementation.__mro__):
        return True
    return re.search(rf"self\.{name}\s*(:[^=]*)?=", inspect.getsource(implementation)) is not None


def _conforms(role: type, implementation: type) -> list[str]:
    """What `implementation` lacks of `role`, or has otherwise than declared."""
    methods, attributes = _declared(role)
    problems = [f"attribute {name}: missing" for name in sorted(attributes) if not _has_attribute(implementation, name)]
    for name, declared in sorted(methods.items()):
        implemented = getattr(implementation, name, None)
        if implemented is None:
            problems.append(f"{name}: missing")
            continue
        if inspect.iscoroutinefunction(implemented) != inspect.iscoroutinefunction(declared):
            problems.append(f"{name}: async differs")
        want = _shape(declared)
        have = [(n, kind, "any" if i < len(want) and want[i][2] == "any" and d is not inspect.Parameter.empty else d)
                for i, (n, kind, d) in enumerate(_shape(implemented))]
        if have != want:
            problems.append(f"{name}: {have} is not {want}")
    return problems


@pytest.mark.parametrize("role", STORE_ROLES, ids=lambda r: r.__name__)
@pytest.mark.parametrize("store", STORES, ids=lambda s: s.__name__)
def test_each_backends_store_plays_each_role_as_declared(store, role):
    assert _declared(role)[0], role  # a role declares something to check
    assert _conforms(role, store) == []


@pytest.mark.parametrize("role", BACKEND_ROLES, ids=lambda r: r.__name__)
@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_each_backend_plays_each_role_as_declared(backend, role):
    assert _declared(role)[0], role
    assert _conforms(role, backend) == []


def test_the_store_is_every_role_at_once():
    assert set(_declared(base.AgentStore)[0]) == set().union(*(_declared(r)[0] for r in STORE_ROLES))


def test_a_method_missing_or_drifting_is_told():
    class Drifted:
        agent_id = "a"

        async def window_of(self, reader, key, session_id=None):  # a default the role does not declare
            ...

        def windows_of(self, reader, key):  # not async
            ...

        async def branch_rows(self, reader, window):  # renamed parameter
            ...

    problems = _conforms(base.TranscriptReads, Drifted)
    assert any(p.startswith("window_of:") for p in problems)
    assert "windows_of: async differs" in problems
    assert any(p.startswith("branch_rows:") for p in problems)
    assert "message_rows: missing" in problems
    assert "reader: missing" in problems


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_each_backend_declares_its_features(backend):
    assert isinstance(backend.features, base.Features)
