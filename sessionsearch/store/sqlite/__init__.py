"""The SQLite backend: one database file per agent under the data dir."""

from .backend import SqliteBackend
from .store import SqliteAgentStore

__all__ = ["SqliteAgentStore", "SqliteBackend"]
