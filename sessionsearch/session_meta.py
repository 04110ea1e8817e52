"""The rules for a session's metadata fields (SPEC §3), one place for every way metadata arrives:
an upsert refuses the request on the first problem, an import reports each and leaves the field out."""

from __future__ import annotations

from typing import Any

from .errors import InvalidRequest
from .keys import check_session_key
from .values import check_stored_name

KINDS = ("direct", "group", "subagent", "cron", "system")
TEXT_FIELDS = ("label", "displayName", "group", "sessionId")
KEY_FIELDS = ("spawnedBy", "parentSessionKey")


def check_meta(fields: dict[str, Any]) -> tuple[dict[str, Any], list[InvalidRequest]]:
    """`fields` without the ones that break a rule, and the problems found, in the order an upsert
    has always reported them (text fields, session keys, kind, incognito). A null text, key or
    kind is no problem (the field is cleared); a present incognito must be a boolean. Fields
    these rules do not name pass through."""
    problems: list[InvalidRequest] = []
    for name in TEXT_FIELDS:
        value = fields.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            problems.append(InvalidRequest(f"{name} must be a string", field=name))
            continue
        try:
            check_stored_name(value, name)
        except InvalidRequest as exc:
            problems.append(exc)
    for name in KEY_FIELDS:
        if fields.get(name) is not None:
            try:
                check_session_key(fields[name], field=name)
            except InvalidRequest as exc:
                problems.append(exc)
    kind = fields.get("kind")
    if kind is not None and (not isinstance(kind, str) or kind not in KINDS):
        problems.append(InvalidRequest(f"kind must be one of {', '.join(sorted(KINDS))}", field="kind"))
    if "incognito" in fields and not isinstance(fields["incognito"], bool):
        problems.append(InvalidRequest("incognito must be a boolean", field="incognito"))
    refused = {problem.field for problem in problems}
    return {name: value for name, value in fields.items() if name not in refused}, problems
