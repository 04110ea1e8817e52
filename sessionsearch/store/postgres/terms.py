"""What the agent's postings are keyed by, and the BM25 constants searches and builds share.

The bottom of the backend's search modules: search.py, recent.py, postings.py and
postings_build.py all read these, and it imports none of them.
"""

from __future__ import annotations

import re

K1, B = 1.2, 0.75  # BM25's, as FTS5's bm25() has them
FRESH_LIMIT = 20_000  # rows written since a build beyond which its words are searched the slow way
PREFIX_FRESH_LIMIT = 2_000  # the same for prefixes (a fresh row's prefix frequency walks its terms)
WORD, PREFIX, RECENT = 0, 1, 2  # the kinds of postings (ss_postings.kind)
MIN_LEN, MAX_LEN = 1, 8  # prefix lengths with postings: the palette's last word as it is typed
PREFIX_RE = re.compile(f"[a-z0-9]{{{MIN_LEN},{MAX_LEN}}}")


def is_prefix_key(lexeme: str) -> bool:
    """A prefix the postings can answer: 1-8 ASCII letters or digits (one lexeme, folded)."""
    return PREFIX_RE.fullmatch(lexeme) is not None
