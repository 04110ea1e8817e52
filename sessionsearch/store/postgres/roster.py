"""A roster read on PostgreSQL (store/roster.py): one statement over the sessions of every agent
asked, the spawn tree followed across agents by a recursive CTE."""

from __future__ import annotations

from ..records import SessionMeta
from ..roster import Dialect, RosterQuery, roster_chosen, roster_select, roster_where
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


async def read_keys(reader: Reader, anos: list[int], q: RosterQuery) -> dict[int, tuple[list[str], bool]]:
    """Per agent: the keys `q` selects, or (True) those it does not (incognito ones among them),
    whichever are fewer; one statement. An agent without sessions is left out."""
    params: dict[str, object] = {"anos": anos}
    chosen, join = roster_chosen(q, DIALECT, "ss_windows", roster_where(q, DIALECT, params, tree="tree"))
    head = _TREE.removesuffix(" ") + ", " if q.spawned_by is not None else "WITH "
    rows = await reader.all(
        f"{head}c AS MATERIALIZED (SELECT s.ano, s.session_key AS key, {chosen} FROM ss_sessions s{join} "
        "WHERE s.ano = ANY(%(anos)s)), n AS (SELECT ano, sum(chosen) * 2 > count(*) AS most FROM c GROUP BY ano) "
        "SELECT n.ano, n.most, c.key FROM n LEFT JOIN c ON c.ano = n.ano AND (c.chosen = 1) <> n.most",
        params, last=True)
    out: dict[int, tuple[list[str], bool]] = {}
    for ano, most, key in rows:
        keys, _ = out.setdefault(ano, ([], bool(most)))
        if key is not None:
            keys.append(key)
    return out
