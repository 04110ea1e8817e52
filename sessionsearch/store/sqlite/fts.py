"""A search's words as an FTS5 expression: each word a quoted string, so never FTS5 syntax."""

from __future__ import annotations

from ..base import Match


def quote(word: str) -> str:
    """An FTS5 string literal: the word in double quotes, inner quotes doubled."""
    return '"' + word.replace('"', '""') + '"'


def fts5_match(match: Match | None) -> str | None:
    """`"w1" AND "w2" *` for Match(("w1", "w2"), prefix=True); None for no words."""
    if match is None or not match.words:
        return None
    parts = [quote(w) for w in match.words]
    if match.prefix:
        parts[-1] += " *"
    return " AND ".join(parts)
