"""`since` and `until`: an instant as epoch milliseconds or an ISO 8601 date or time (SPEC §4).

Accepted strings, one grammar for the validator and the OpenAPI pattern (ISO_PATTERN):

    YYYY-MM-DD                                   midnight UTC of that day
    YYYY-MM-DD(T|t| )hh:mm[:ss[.f…]][zone]       zone: Z, z, ±hh:mm or ±hhmm; none means UTC

A fraction finer than a millisecond rounds up to the next one: timestamps are whole milliseconds,
so `ts >= since` and `ts < until` keep the same hits either way.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import InvalidRequest
from ..transcript.events import MAX_TS_MS, MIN_TS_MS

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TIME = (r"[Tt ](?P<hh>[01][0-9]|2[0-3]):(?P<mi>[0-5][0-9])(?::(?P<ss>[0-5][0-9])(?:\.(?P<frac>[0-9]{1,9}))?)?"
         r"(?P<zone>[Zz]|(?P<sign>[+-])(?P<zh>[01][0-9]|2[0-3]):?(?P<zm>[0-5][0-9]))?")
_ISO = re.compile(rf"(?P<y>[0-9]{{4}})-(?P<mo>0[1-9]|1[0-2])-(?P<d>0[1-9]|[12][0-9]|3[01])(?:{_TIME})?")
# The same grammar for JSON Schema, with the calendar spelled out (datetime checks it here): days
# per month, 29 February in leap years only, no year 0.
_LEAP = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
_DAYS = ("(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
         "|02-(?:0[1-9]|1[0-9]|2[0-8]))")
ISO_PATTERN = (f"^(?!0000)(?:[0-9]{{4}}-{_DAYS}|{_LEAP}-02-29)(?:" + re.sub(r"\?P<\w+>", "?:", _TIME)
               + ")?(?![\\s\\S])")
FORMS = "epoch milliseconds or an ISO 8601 date or time"


def parse_instant(value: object, name: str) -> int | None:
    """`value` as epoch milliseconds; None when absent (None). Raises InvalidRequest naming `name`."""
    if value is None:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        # past the ends only by a zone offset or a rounded fraction on the first or last day: no
        # stored timestamp lies out there, so the nearest bound keeps exactly the same hits
        return min(max(_iso_ms(value, name), MIN_TS_MS), MAX_TS_MS + 1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be {FORMS}", field=name)
    if not MIN_TS_MS <= value <= MAX_TS_MS:
        raise InvalidRequest(f"{name} must be between {MIN_TS_MS} and {MAX_TS_MS} epoch milliseconds "
                             "(years 1 to 9999 UTC)", field=name)
    return value


def _iso_ms(text: str, name: str) -> int:
    m = _ISO.fullmatch(text)
    try:
        if m is None:
            raise ValueError(text)
        moment = datetime(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["hh"] or 0), int(m["mi"] or 0),
                          int(m["ss"] or 0), tzinfo=UTC)
    except ValueError:  # no match, or no such day (2026-02-30, year 0)
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise InvalidRequest(f"{name} must be {FORMS}, not {shown!r}", field=name) from None
    ms = (moment - _EPOCH) // timedelta(milliseconds=1)
    if m["frac"]:
        ms += -(-int(m["frac"].ljust(9, "0")) // 1_000_000)  # nanoseconds, rounded up to milliseconds
    if m["sign"]:
        offset = (int(m["zh"]) * 60 + int(m["zm"])) * 60_000
        ms -= offset if m["sign"] == "+" else -offset
    return ms


def parse_range(body: dict[str, Any]) -> tuple[int | None, int | None]:
    """The request's `since` (inclusive) and `until` (exclusive), checked against each other."""
    since = parse_instant(body.get("since"), "since")
    until = parse_instant(body.get("until"), "until")
    if since is not None and until is not None and since >= until:
        raise InvalidRequest("since must be earlier than until", field="since")
    return since, until
