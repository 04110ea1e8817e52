"""sessionsearch: full-text search over an agent gateway's session transcripts."""

from .engine import Engine
from .errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    OutOfFiles,
    SearchTimeout,
    SessionSearchError,
    StorageFull,
    Unavailable,
)
from .protocol import (
    AppendParams,
    HistoryParams,
    ListParams,
    RotateParams,
    SearchParams,
    SessionRef,
    StatusParams,
    UpsertParams,
)
from .settings import SETTINGS, Settings

__all__ = [
    "AppendParams",
    "Conflict",
    "Engine",
    "Forbidden",
    "HistoryParams",
    "InvalidRequest",
    "ListParams",
    "NotFound",
    "OutOfFiles",
    "RotateParams",
    "SETTINGS",
    "SearchParams",
    "SearchTimeout",
    "SessionRef",
    "SessionSearchError",
    "Settings",
    "StatusParams",
    "StorageFull",
    "Unavailable",
    "UpsertParams",
]

__version__ = "0.1.0"
