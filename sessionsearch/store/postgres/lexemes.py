"""What PostgreSQL indexes of a message, and how a search's words become a tsquery.

PostgreSQL never tokenizes anything here: a message's tokens are text.py's `tokens()` (the
folding and splitting of SQLite's `unicode61 remove_diacritics 2`), computed in Python and
stored as a tsvector of lexemes taken verbatim (`array_to_tsvector`), beside their counts (tf,
jsonb) and the row's length in tokens (dl) that BM25 needs. A search's words are the same
tokens; the tsquery is assembled in SQL (TSQUERY_SQL) from a bound text[] with each lexeme
quoted, so no user text is ever read as tsquery syntax.

A tsvector lexeme holds at most 2,047 bytes: a longer token is stored (and searched) as `~` and
its SHA-256, which no real token can look like (tokens are letters and digits only); such a word
still matches as a whole word, never as a prefix. A tsvector holds at most 1 MB of lexemes:
distinct tokens past MAX_LEXEME_BYTES are left out of the index (still counted in dl).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

from ...search.text import tokens

MAX_TOKEN_BYTES = 2046
MAX_LEXEME_BYTES = 900_000

# A tsquery from %(words)s (text[], lexemes) all required, the last as a prefix when %(prefix)s:
# each lexeme in single quotes with quotes and backslashes doubled, as tsquery input reads them.
TSQUERY_SQL = (
    "(SELECT string_agg('''' || replace(replace(w, '\\', '\\\\'), '''', '''''') || '''' || "
    "CASE WHEN %(prefix)s AND o = cardinality(%(words)s::text[]) THEN ':*' ELSE '' END, ' & ' ORDER BY o) "
    "FROM unnest(%(words)s::text[]) WITH ORDINALITY AS u(w, o))::tsquery")


def lexeme(token: str) -> str:
    """The lexeme a token is stored and searched as."""
    if len(token) * 4 <= MAX_TOKEN_BYTES or len(token.encode("utf-8")) <= MAX_TOKEN_BYTES:
        return token
    return "~" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def index_fields(text: str) -> tuple[int, str, list[str]]:
    """(dl, tf as JSON, the distinct lexemes for the tsvector) of a message's text."""
    toks = tokens(text)
    counts = Counter(lexeme(t) for t in toks)
    kept, size = [], 0
    for lex in counts:
        size += len(lex.encode("utf-8")) + 8
        if size > MAX_LEXEME_BYTES:
            break
        kept.append(lex)
    return len(toks), json.dumps({lex: counts[lex] for lex in kept}, ensure_ascii=False), kept


def query_lexemes(words: tuple[str, ...]) -> list[str]:
    """A Match's words (folded tokens, from the query parser) as the lexemes they are stored as."""
    return [lexeme(w) for w in words if w]
