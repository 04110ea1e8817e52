"""The store is a seam: one interface (store/base.py) that every backend implements, and nothing
above it that names a backend, opens a connection or writes SQL."""

import inspect

from sessionsearch.store.base import AgentStore
from sessionsearch.store.sqlite import SqliteAgentStore


def _interface_methods() -> dict[str, object]:
    return {name: value for name, value in vars(AgentStore).items()
            if callable(value) and not name.startswith("_")}


def test_the_sqlite_store_has_every_method_of_the_interface_with_its_parameters():
    methods = _interface_methods()
    assert {"reader", "append", "search_top", "ping", "claim_and_reconcile_small"} <= set(methods)
    for name, declared in methods.items():
        implemented = getattr(SqliteAgentStore, name, None)
        assert implemented is not None, name
        assert inspect.iscoroutinefunction(implemented) == inspect.iscoroutinefunction(declared), name
        want = [(p.name, p.kind, p.default is inspect.Parameter.empty)
                for p in inspect.signature(declared).parameters.values()]
        have = [(p.name, p.kind, p.default is inspect.Parameter.empty)
                for p in inspect.signature(implemented).parameters.values()]
        assert have == want, name
