"""A roster read on PostgreSQL (store/roster.py): one statement over the sessions of every agent
asked, the spawn tree followed across agents by a recursive CTE."""

from __future__ import annotations

from ..records import SessionMeta
from ..roster import Dialect, RosterQuery, roster_select, roster_where
from .db import Reader

ACTIVITY = "greatest(s.updated_at, coalesce(w.updated_at, 0))"

DIALECT = Dialect(
    param=lambda name: f"%({name})s",
    non_ascii=lambda x: f"octet_length({x}) <> char_length({x})",
    in_list=lambda x, p: f"{x} = ANY({p})",
    pack=lambda values: values,
    activity=ACTIVITY,
    key_order='s.session_key COLLATE "C"',  # code point order, as Python compares keys
)

# every session `root` spawned, transitively, in any agent (UNION: a loop in the metadata ends it)
_TREE = ("WITH RECURSIVE tree(key) AS (SELECT session_key FROM ss_sessions WHERE spawned_by = %(root)s "
         "UNION SELECT c.session_key FROM ss_sessions c JOIN tree t ON c.spawned_by = t.key) ")


async def read_roster(reader: Reader, anos: list[int], q: RosterQuery) -> list[SessionMeta]:
    """`q`'s sessions of the agents `anos`, newest activity first, in one statement."""
    params: dict[str, object] = {"anos": anos}
    where = ["s.ano = ANY(%(anos)s)", *roster_where(q, DIALECT, params, tree="tree")]
    head = _TREE if q.spawned_by is not None else ""
    rows = await reader.all(head + roster_select(q, DIALECT, "ss_sessions", "ss_windows", where, params), params,
                            last=True)
    return [SessionMeta(*row) for row in rows]
