"""Title search for the Control UI (`sessions.list` with `search`).

Punctuation and repeated whitespace separate words, the words must appear in sequence in the
label or display name, and the last one may be a prefix: `per session communi` finds
"Per-session communication controls". A literal session key finds its own session.
"""

from __future__ import annotations

from ..store.base import SessionMeta
from ..text.unicode61 import tokens


def title_matches(search: str, meta: SessionMeta) -> bool:
    query = search.strip()
    if query and query == meta.session_key:
        return True
    words = tokens(query)
    if not words:
        return False
    return any(_phrase_prefix(words, tokens(title)) for title in (meta.label, meta.display_name) if title)


def _phrase_prefix(words: list[str], title: list[str]) -> bool:
    n = len(words)
    for start in range(len(title) - n + 1):
        if title[start:start + n - 1] == words[:-1] and title[start + n - 1].startswith(words[-1]):
            return True
    return False
