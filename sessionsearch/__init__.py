"""sessionsearch: full-text search over an agent gateway's session transcripts."""

from .engine import Engine
from .errors import (
    Forbidden,
    InvalidRequest,
    NotFound,
    SearchTimeout,
    SessionSearchError,
    Unavailable,
)
from .settings import SETTINGS, Settings

__all__ = [
    "Engine",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "SETTINGS",
    "SearchTimeout",
    "SessionSearchError",
    "Settings",
    "Unavailable",
]

__version__ = "0.1.0"
