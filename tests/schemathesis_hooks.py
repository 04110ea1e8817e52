"""Hooks schemathesis loads (SCHEMATHESIS_HOOKS) for tests/api/test_openapi.py.

One rule of sessions.search joins two fields, which JSON Schema cannot say: `until` must be later
than `since` (the document states it in prose). Bodies breaking it are not generated, so that a
body the schema calls valid is one the server accepts: `filter_body` for the fuzzing phase,
`filter_case` for the coverage phase, which does not call `filter_body`.
"""

from __future__ import annotations

import schemathesis

from sessionsearch.errors import InvalidRequest
from sessionsearch.search.timerange import parse_instant


def _in_order(body) -> bool:
    if not isinstance(body, dict) or body.get("since") is None or body.get("until") is None:
        return True
    try:
        return parse_instant(body["since"], "since") < parse_instant(body["until"], "until")
    except InvalidRequest:  # a value the schema refuses anyway: a negative case, kept
        return True


@schemathesis.hook
def filter_body(context, body) -> bool:
    return _in_order(body)


@schemathesis.hook
def filter_case(context, case) -> bool:
    return _in_order(case.body)
