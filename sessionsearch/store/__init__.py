"""Transcript storage: schema, migrations and the primitive reads and writes, per backend."""

from .base import AppendResult, ClaimInfo, SessionMeta, WindowMeta
from .sqlite import SqliteAgentStore

__all__ = ["AppendResult", "ClaimInfo", "SessionMeta", "SqliteAgentStore", "WindowMeta"]
