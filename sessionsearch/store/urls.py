"""Database URLs: which backend a URL names, and how one is shown (never with its password)."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import InvalidRequest

POSTGRES_SCHEMES = ("postgresql", "postgres")
_SECRET_PARAMS = {"password", "sslpassword"}
HIDDEN = "***"


def redact(url: str) -> str:
    """The URL with its password (in the user part or a `password=` parameter) replaced by ***.

    Whatever cannot be parsed as a URL is shown as its scheme alone, so a malformed value that
    happens to hold a secret is not echoed either.
    """
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            if ":" in userinfo:
                userinfo = userinfo.split(":", 1)[0] + ":" + HIDDEN
            netloc = f"{userinfo}@{host}"
        query = parts.query
        if query:
            query = urlencode([(k, HIDDEN if k.lower() in _SECRET_PARAMS else v)
                               for k, v in parse_qsl(query, keep_blank_values=True)], safe="*")
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*(?=:)", url)
        return f"{scheme.group(0)}://{HIDDEN}" if scheme else HIDDEN


def check_database_url(url: str) -> str:
    """The URL when it names PostgreSQL; else InvalidRequest saying what is accepted."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise InvalidRequest(f"database_url {redact(url)} is not a valid URL ({exc}); expected "
                             "postgresql://user:password@host:5432/dbname", field="database_url") from None
    if parts.scheme.lower() not in POSTGRES_SCHEMES:
        shown = f"{parts.scheme!r}" if parts.scheme else "no scheme"
        raise InvalidRequest(
            f"database_url {redact(url)} has {shown}: only PostgreSQL is supported "
            "(postgresql://user:password@host:5432/dbname); leave it unset to keep SQLite files under the "
            "data dir", field="database_url")
    return url
