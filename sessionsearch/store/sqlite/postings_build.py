"""When the common words' postings (postings.py) are worth building, and which words a build redoes.

A build reads every row holding a common word (minutes at 1,000,000 messages), so it runs when
it pays off, not on every write:

- never while windows wait for reconciliation: the index is still being rewritten, and a build
  then would be stale within minutes; once the backlog drains, a build is due if
- no build ever ran and the index holds enough rows for a word to be common ("first"), or
- the index grew by `grow_share` of its rows at the last build ("grown": words became common), or
- a word's or the prefixes' postings are stale, or half a word's log budget is used ("stale": its
  searches are about to go back to FTS5 alone), or
- the index changed by FOLD_AFTER rows since the prefixes' build or last fold ("fold");
- else, "bounds" when the index moved on since its score bounds were folded (bounds.py): a fold
  of them alone, whatever the agent's size (they serve searches of many agents).

A build redoes only the words that need it (new, stale, or past half their log budget); the
prefixes are built when there are none or they were given up, and else have the index's changes
folded into them (prefixes.py: a cost in the rows changed, not in the index). The others stay
exact through the index log (postings.py) and are kept as they are.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .bm25 import varint
from .bounds import bounds_due
from .postings import FRESH_LIMIT
from .prefixes import FOLD_AFTER, LOG_LIMIT, positions

BUILT_ROWS_KEY = "hot_built_rows"  # meta: the index's rows when the last build started


def index_rows(conn: sqlite3.Connection) -> int:
    """The rows in the FTS index, from its averages record (no count)."""
    row = conn.execute("SELECT block FROM msg_fts_data WHERE id = 1").fetchone()
    return varint(row[0], 0)[0] if row and row[0] else 0


def postings_due(path: Path, *, min_docs: int, grow_share: float) -> str | None:
    """Why a build of the agent's postings is due now ("first", "grown", "stale", "fold"), or that
    only its score bounds are stale ("bounds": bounds.py, a fold of them alone), or None."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        conn.execute("BEGIN")  # one snapshot
        if conn.execute("SELECT 1 FROM windows WHERE needs_rebuild = 1 LIMIT 1").fetchone():
            return None
        rows = index_rows(conn)
        why = _postings_why(conn, rows, min_docs=min_docs, grow_share=grow_share)
        return "bounds" if why is None and bounds_due(conn, rows) else why
    finally:
        conn.close()


def _postings_why(conn: sqlite3.Connection, rows: int, *, min_docs: int, grow_share: float) -> str | None:
    built = conn.execute("SELECT value FROM meta WHERE key = ?", (BUILT_ROWS_KEY,)).fetchone()
    if built is None:
        return "first" if rows >= min_docs else None
    if rows - built[0] >= grow_share * max(built[0], min_docs):
        return "grown"
    upkeep = prefix_upkeep(conn)
    if stale_words(conn) or upkeep == "stale":
        return "stale"
    return "fold" if upkeep == "fold" else None


def stale_words(conn: sqlite3.Connection) -> set[str]:
    """Words whose postings are stale or have used half their log budget."""
    (last,) = conn.execute(
        "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'index_log'), 0)").fetchone()
    return {w for w, log_seq in conn.execute("SELECT word, log_seq FROM hot_words")
            if log_seq < 0 or last - log_seq >= FRESH_LIMIT // 2}


def prefix_upkeep(conn: sqlite3.Connection) -> str | None:
    """What the prefixes' postings (prefixes.py) need: "first" (none built), "stale" (given up, or
    more index changes since their build or last fold than a search takes in, LOG_LIMIT: a build,
    which after a bulk ingest costs less than a fold of its rows, counted one by one), "fold"
    (FOLD_AFTER or more changes), or None."""
    count, oldest, gone = conn.execute("SELECT count(*), min(log_seq), min(gone_seq) FROM prefix_words").fetchone()
    if not count:
        return "first"
    if oldest < 0:
        return "stale"
    last, glast = positions(conn)
    changes = (last - oldest) + (glast - gone)
    if changes > LOG_LIMIT:
        return "stale"
    return "fold" if changes >= FOLD_AFTER else None


def prefix_upkeep_at(path: Path) -> str | None:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        conn.execute("BEGIN")  # one snapshot
        return prefix_upkeep(conn)
    finally:
        conn.close()


def words_to_build(path: Path, common: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Of the common words, those a build must redo: without postings, or stale (see above)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        have = {w for (w,) in conn.execute("SELECT word FROM hot_words")}
        stale = stale_words(conn)
    finally:
        conn.close()
    return [(w, n) for w, n in common if w not in have or w in stale]


def built_rows(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return index_rows(conn)
    finally:
        conn.close()
