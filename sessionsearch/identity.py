"""Who asks: the requester a search or history read is made for (its session's visibility applies).

An identity, below the search package and auth alike: auth.py's scoped tokens bind one, the
request parsers read one, and visibility decides by one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidRequest
from .keys import check_session_key
from .values import without_nulls


@dataclass(frozen=True)
class Requester:
    session_key: str
    sandboxed: bool = False


def parse_requester(raw: object) -> Requester | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest("requester must be an object with a sessionKey", field="requester")
    unknown = set(raw) - {"sessionKey", "sandboxed"}
    if unknown:
        raise InvalidRequest(f"requester has unknown field {sorted(unknown)[0]!r}", field="requester")
    raw = without_nulls(raw, ["sandboxed"])
    key = check_session_key(raw.get("sessionKey"), field="requester.sessionKey")
    sandboxed = raw.get("sandboxed", False)
    if not isinstance(sandboxed, bool):
        raise InvalidRequest("requester.sandboxed must be a boolean", field="requester.sandboxed")
    return Requester(key, sandboxed)
