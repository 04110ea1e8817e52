"""The session list's filters (`scope`, search/scope.py) as SQL over a store's sessions table, written
once for both stores (their few differences in `Dialect`).

A session's activity (its `updatedAt`) is read in the statement itself: the later of its metadata's
time and its current window's last append, so `activeMinutes` and the list's order hold appends
made a moment ago (the catalog's copy lags them). Untrusted text only ever reaches the statement as
bind parameters; a title search's words are LIKE patterns with `%`, `_` and the escape escaped.

Two rules fold Unicode the way no SQL engine here does (casefold for `label`, the unicode61
tokenizer's folding for the title search): their SQL is exact for titles of ASCII text and lets
every other title through, and the caller checks the rows returned exactly (SessionScope.holds_text).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .records import SessionMeta

# the columns of a roster row, a SessionMeta; `{activity}` is the dialect's activity expression
ROSTER_COLUMNS = ("s.session_key, w.session_id, s.label, s.display_name, s.spawned_by, s.parent_session_key, "
                  "s.kind, s.grp, s.incognito, s.archived_at, {activity}")
# RosterQuery.keys_only's: the key and what the caller checks exactly; the rest left empty (NULL, 0).
# A scoped search reads every session its scope selects, 10,000 of them or more: the current
# window's join and the wide rows were 5-8x the statement's time (decisions.md, 2026-12-08)
KEY_COLUMNS = "s.session_key, NULL, s.label, s.display_name, NULL, NULL, NULL, NULL, 0, NULL, 0"

Position = tuple[int, str]  # a listed session's (updatedAt, sessionKey); the list runs newest first


@dataclass(frozen=True, slots=True)
class RosterQuery:
    """Which sessions a roster read selects (each field None or False: no such filter), in what
    order it pages (`after`, `limit`). Incognito sessions are never selected."""

    label: str | None = None  # casefolded; narrowed in SQL, checked exactly by the caller
    title_words: tuple[str, ...] | None = None  # a title search's tokens (None: no title search)
    title_key: str | None = None  # the title search as typed, trimmed: a literal key selects its session
    kinds: tuple[str, ...] | None = None
    not_kinds: tuple[str, ...] = ()
    group: str | None = None
    spawned_by: str | None = None  # the sessions this key spawned, transitively (never itself)
    # the same, as the caller's catalog holds the spawn tree: a store of one agent cannot follow a
    # tree that crosses agents (SQLite); a store of every agent follows `spawned_by` itself
    spawned: frozenset[str] | None = None
    active_since: int | None = None  # activity (epoch ms) at least this
    palette: bool = False  # the Control UI palette's sessions (search/scope.py in_palette)
    archived: bool = True  # False: archived sessions left out
    after: Position | None = None  # resume after this session, in the list's order
    limit: int | None = None
    keys_only: bool = False  # rows of KEY_COLUMNS, in no order (a search's scope: which sessions, not their rows)

    @property
    def reads_windows(self) -> bool:
        """Whether the statement reads the sessions' current windows (their activity, their rows)."""
        return not self.keys_only or self.active_since is not None or self.after is not None


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between the stores' SQL here."""

    param: Callable[[str], str]  # a named bind parameter's placeholder
    non_ascii: Callable[[str], str]  # a condition: the text expression holds a character past ASCII
    in_list: Callable[[str, str], str]  # a condition: the expression is one of the list parameter's
    pack: Callable[[list[str]], object]  # a list as that parameter's value
    activity: str  # a session's activity over `s` (sessions) and `w` (its current window)
    key_order: str  # the session key in code point order (Python's, so cursors compare alike)


def like_escape(word: str) -> str:
    """`word` as literal text inside a LIKE pattern (escape character `\\`)."""
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def roster_where(q: RosterQuery, d: Dialect, params: dict[str, object], *, tree: str | None = None) -> list[str]:
    """The conditions selecting `q`'s sessions (over `s`, `w`), their values put in `params`.
    `tree`: a relation of the keys `q.spawned_by` spawned (a recursive CTE); else `q.spawned`."""
    p = d.param
    where = ["s.incognito = 0"]

    def bind(name: str, value: object) -> str:
        params[name] = value
        return p(name)

    if q.label is not None:
        where.append(f"(lower(coalesce(s.label, '')) = {bind('label', q.label)} OR {d.non_ascii('s.label')})")
    if q.title_words is not None:
        either = [f"s.session_key = {bind('title_key', q.title_key or '')}"]
        if q.title_words:
            title = "lower(coalesce(s.label, '') || ' ' || coalesce(s.display_name, ''))"
            likes = [f"{title} LIKE {bind(f'title{i}', '%' + like_escape(word) + '%')} ESCAPE '\\'"
                     for i, word in enumerate(q.title_words)]
            either += [d.non_ascii("s.label"), d.non_ascii("s.display_name"), "(" + " AND ".join(likes) + ")"]
        where.append("(" + " OR ".join(either) + ")")
    if q.kinds is not None:
        where.append(d.in_list("s.kind", bind("kinds", d.pack(list(q.kinds)))) if q.kinds else "1 = 0")
    if q.not_kinds:
        where.append(f"(s.kind IS NULL OR NOT {d.in_list('s.kind', bind('not_kinds', d.pack(list(q.not_kinds))))})")
    if q.group is not None:
        where.append(f"s.grp = {bind('grp', q.group)}")
    if q.spawned_by is not None:
        if tree is not None:
            where.append(f"s.session_key IN (SELECT key FROM {tree}) AND s.session_key <> {bind('root', q.spawned_by)}")
        else:
            where.append(d.in_list("s.session_key", bind("spawned", d.pack(sorted(q.spawned or ())))))
    if q.active_since is not None:
        where.append(f"{d.activity} >= {bind('since', q.active_since)}")
    if q.palette:
        where.append("s.archived_at IS NULL AND ((s.spawned_by IS NULL AND (s.kind IS NULL OR s.kind <> 'subagent')) "
                     "OR (s.grp IS NOT NULL AND s.grp <> ''))")
    if not q.archived:
        where.append("s.archived_at IS NULL")
    if q.after is not None:
        at, key = bind("after_at", q.after[0]), bind("after_key", q.after[1])
        where.append(f"({d.activity} < {at} OR ({d.activity} = {at} AND {d.key_order} > {key}))")
    return where


def roster_select(q: RosterQuery, d: Dialect, sessions: str, windows: str, where: list[str],
                  params: dict[str, object]) -> str:
    """The roster read's SELECT over the dialect's `sessions` and `windows` tables."""
    columns = KEY_COLUMNS if q.keys_only else ROSTER_COLUMNS.format(activity=d.activity)
    join = f" LEFT JOIN {windows} w ON w.wid = s.current_wid" if q.reads_windows else ""
    return f"SELECT {columns} FROM {sessions} s{join} WHERE {' AND '.join(where)}{roster_order(q, d, params)}"


def roster_chosen(q: RosterQuery, d: Dialect, windows: str, where: list[str]) -> tuple[str, str]:
    """(the column `chosen`, 1 where `q` selects the session, else 0; the join it needs) for a
    read of every session that returns only the smaller side (roster_keys): the stores count a
    side in C, and a scope that selects most of 10,000 sessions hands Python the few it does not."""
    join = f" LEFT JOIN {windows} w ON w.wid = s.current_wid" if q.reads_windows else ""
    return f"CASE WHEN {' AND '.join(where)} THEN 1 ELSE 0 END AS chosen", join


def roster_order(q: RosterQuery, d: Dialect, params: dict[str, object]) -> str:
    """ORDER BY (newest activity first, then key) and LIMIT of a roster read."""
    if q.keys_only and q.limit is None:
        return ""
    order = f" ORDER BY {d.activity} DESC, {d.key_order}"
    if q.limit is not None:
        params["limit"] = q.limit
        order += f" LIMIT {d.param('limit')}"
    return order


def position(meta: SessionMeta) -> Position:
    return meta.updated_at, meta.session_key


def sort_key(meta: SessionMeta) -> tuple[int, str]:
    """A roster row's place in the list's order (newest activity first, then key)."""
    return -meta.updated_at, meta.session_key
