"""The error tree. Every error the service raises on purpose descends from SessionSearchError.

The HTTP layer maps the tree to status codes in one place; the Python API raises these as they are.
"""

from __future__ import annotations


class SessionSearchError(Exception):
    """Raised when sessionsearch refuses or fails a request; the root of the tree."""

    code = "INTERNAL"

    def __init__(self, message: str, **context: object) -> None:
        super().__init__(message)
        self.message = message
        self.context = context


class InvalidRequest(SessionSearchError):
    """Raised when a request is malformed; `field` names where, when known."""

    code = "INVALID_REQUEST"

    def __init__(self, message: str, *, field: str | None = None, **context: object) -> None:
        super().__init__(message, **context)
        self.field = field


class Conflict(InvalidRequest):
    """Raised when a well-formed request conflicts with what is stored (a sessionId of another key,
    an archived session); HTTP answers it 409, with the code of an invalid request."""


class Forbidden(SessionSearchError):
    """Raised when the requester may not see a session or agent it targeted."""

    code = "FORBIDDEN"


class NotFound(SessionSearchError):
    """Raised when a named session or window does not exist."""

    code = "NOT_FOUND"


class SearchTimeout(SessionSearchError):
    """Raised when a search exceeds its time budget (admission included)."""

    code = "TIMEOUT"

    def __init__(self, message: str = "search timed out; retry with a sessionKey or more specific keywords",
                 **context: object) -> None:
        super().__init__(message, **context)


class Unavailable(SessionSearchError):
    """Raised when a backing service (database, broker) cannot be reached."""

    code = "UNAVAILABLE"


class Busy(Unavailable):
    """Raised when a credential's request found no free turn within its wait (search/cost.py): the
    credential already has as many requests running as it may; one retried later is answered."""


class OutOfFiles(Unavailable):
    """Raised when the process could not open a file a request needed (its open-file limit, or the
    system's, reached) even after closing its idle agent stores; nothing was done, and the request
    succeeds again once files are free (no restart needed)."""


class StorageFull(Unavailable):
    """Raised when a write could not be stored because the data dir's disk is full; nothing of it
    was stored, and writes succeed again once space is freed (no restart needed)."""

    def __init__(self, agent_id: str, **context: object) -> None:
        super().__init__(f"database or disk is full: agent {agent_id!r} stored nothing of this write; "
                         "writes resume once the data dir has free space again", agent_id=agent_id, **context)
