"""The SQLite backend: one database file per agent under the data dir."""

from .store import SqliteAgentStore

__all__ = ["SqliteAgentStore"]
