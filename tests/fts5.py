"""SQLite FTS5 itself as the oracle of tokens: what `unicode61 remove_diacritics 2` makes of texts."""

from __future__ import annotations

import sqlite3
from collections import defaultdict


def fts5_tokens(texts: list[str]) -> list[list[str]]:
    """The tokens FTS5's `unicode61 remove_diacritics 2` makes of each text, in order (fts5vocab)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE f USING fts5(t, tokenize = 'unicode61 remove_diacritics 2')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, instance)")
        conn.executemany("INSERT INTO f (rowid, t) VALUES (?, ?)", enumerate(texts, 1))
        out: dict[int, list[str]] = defaultdict(list)
        for term, doc in conn.execute("SELECT term, doc FROM v ORDER BY doc, offset"):
            out[doc].append(term)
        return [out[n] for n in range(1, len(texts) + 1)]
    finally:
        conn.close()
