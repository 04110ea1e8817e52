"""A search's words as an FTS5 expression: each part a quoted string, so never FTS5 syntax.

Each word is matched its own way (store/cjk.py): its CJK runs as phrases of the shadow tokens the
index holds for them, the rest as FTS5 strings, all parts of all words ANDed.
"""

from __future__ import annotations

from ...text.cjk import bigrams, query_parts
from ..base import Match


def ascii_sql(column: str = "text") -> str:
    """Whether a message's text is all ASCII (as many bytes as characters), which store/cjk.py never
    changes: tested in C (a GLOB of the CJK ranges parses its class at each character)."""
    return f"length(CAST({column} AS BLOB)) = length({column})"


ASCII_SQL = ascii_sql()
# The text an index row holds, in SQL: `index_text` is registered on the writer's connection and
# called for non-ASCII rows only (no Python call, nor the GIL, for the others).
INDEX_TEXT_SQL = f"CASE WHEN {ASCII_SQL} THEN text ELSE index_text(text) END"


def quote(word: str) -> str:
    """An FTS5 string literal: the word in double quotes, inner quotes doubled."""
    return '"' + word.replace('"', '""') + '"'


def word_terms(word: str, prefix: bool = False) -> list[str]:
    """One word's parts as FTS5 strings: a CJK run the phrase of its bigrams (`"东京 京开"`), other
    text quoted whole; `prefix` makes the word's last part a prefix when it is not CJK (a CJK run
    already matches as any substring)."""
    parts = query_parts(word) or [("word", word)]  # no token at all: quoted whole, as it stands
    terms = [quote(" ".join(bigrams(text))) if kind == "cjk" else quote(text) for kind, text in parts]
    if prefix and parts[-1][0] == "word":
        terms[-1] += " *"
    return terms


def fts5_match(match: Match | None) -> str | None:
    """`"w1" AND "w2" *` for Match(("w1", "w2"), prefix=True), `"w1" OR "w2" *` for one with `any`
    (every phrase of every word OR-ed, as PostgreSQL's tsquery ORs them); None when nothing can match."""
    if match is None or not match.words:
        return None
    last = len(match.words) - 1
    return (" OR " if match.any else " AND ").join(
        t for n, w in enumerate(match.words) for t in word_terms(w, match.prefix and n == last))

# the event rows the word index holds: the active branch's, with text
INDEXABLE = "on_branch = 1 AND text IS NOT NULL"
