"""Transcript storage: schema, migrations and the primitive reads and writes, per backend."""

from .base import AgentStore, AppendResult, ClaimInfo, Reader, SessionMeta, WindowMeta
from .sqlite import SqliteAgentStore

__all__ = ["AgentStore", "AppendResult", "ClaimInfo", "Reader", "SessionMeta", "SqliteAgentStore", "WindowMeta"]
