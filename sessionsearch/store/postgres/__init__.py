"""The PostgreSQL backend: every agent in one database (docs/postgres.md)."""

from .backend import PgBackend
from .migrate import LATEST, migrate, schema_version
from .store import PgAgentStore

__all__ = ["LATEST", "PgAgentStore", "PgBackend", "migrate", "schema_version"]
