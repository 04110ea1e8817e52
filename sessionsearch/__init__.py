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
from .settings import SETTINGS, Settings

__all__ = [
    "Conflict",
    "Engine",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "OutOfFiles",
    "SETTINGS",
    "SearchTimeout",
    "SessionSearchError",
    "Settings",
    "StorageFull",
    "Unavailable",
]

__version__ = "0.1.0"
