"""The agents' Newest (store/base.py) on PostgreSQL: every agent's in one statement, with the
listing's version (what a search statement reads too: backend.py)."""

from __future__ import annotations

from ..base import Newest
from .db import Reader
from .search_many import array_literal

# each agent's meta version, the bound on its clean hot windows' index rows' timestamps (ts_max,
# migration 3; NULL when none holds a row: the column's floor), its windows needing
# reconciliation, and the listing's version
NEWEST_SQL = ("SELECT a.ano, a.meta_version, (SELECT nullif(max(w.ts_max), -9223372036854775808) "
              "FROM ss_windows w WHERE w.ano = a.ano AND w.needs_rebuild = 0 AND w.cold = 0), "
              "ARRAY(SELECT w.wid FROM ss_windows w WHERE w.ano = a.ano AND w.needs_rebuild = 1), "
              "(SELECT coalesce(max(ano), 0) FROM ss_agents) FROM ss_agents a WHERE a.ano = ANY(%s::bigint[])")


async def read_newest(reader: Reader, anos: list[int]) -> tuple[list[Newest], int | None]:
    """The Newest of the agents numbered `anos`, in their order, and the listing's version (None
    when no agent was found)."""
    rows = await reader.all(NEWEST_SQL, (array_literal(anos),), last=True)
    found = {ano: Newest(version, ts_max, frozenset(dirty)) for ano, version, ts_max, dirty, _ in rows}
    return [found[ano] for ano in anos], rows[0][4] if rows else None
