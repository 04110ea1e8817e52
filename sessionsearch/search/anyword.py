"""Hybrid's keyword half (SPEC §4 `mode`): the messages holding any of the query's words, ranked by
BM25, so the rare words weigh most.

A question asked in natural language rarely has every one of its words in its answer, so keyword
mode's all-words list is mostly empty for it. This list is keyword search of the query's words
OR-ed (Match.any: FTS5 `"w1" OR "w2"`, PostgreSQL `'w1' | 'w2'`, each word quoted as keyword
search quotes it), one statement per agent (per store on PostgreSQL where it reads many agents in
one), through keyword search's own path: every scope, visibility, branch, role and time rule holds
for it unchanged. BM25 is a sum over the query's phrases of each one's share in the row (none for a
phrase the row lacks), so a row scores the sum of its words' scores as each word's own search
scores it (tests/meaning/test_any_word.py compares the two on both stores).

The words are the query's distinct words (case folded), each split into its parts (a word's CJK
runs and the text between them: the phrases keyword search ANDs within a word, here each one OR-ed
on its own), at most ANY_WORDS_MAX of them: the ones the store counts fewest rows of (Match.cut:
SQLite's kept term bounds, PostgreSQL's kept document counts), else the longest (long words are the
rare ones, mostly); a query of one such part is its keyword search.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ..store.base import Match
from ..text.cjk import query_parts

if TYPE_CHECKING:
    from .outcome import Hit, Outcome
    from .query import ParsedQuery

# words OR-ed at most: a natural question's words past these are its common ones, which BM25
# weighs little; each word is one more doclist the statement walks
ANY_WORDS_MAX = 12
ANY_WORDS_OFFERED = 32  # the longest words a store chooses the rarest ANY_WORDS_MAX of


def any_words(query: ParsedQuery) -> tuple[list[str], bool]:
    """The parts the any-word list offers the store (at most ANY_WORDS_OFFERED, the longest first,
    distinct once case folded), and whether the last of them is a prefix: the query's last part,
    when the query is a prefix search and that part is not CJK (a CJK run matches as any substring
    already)."""
    seen: dict[str, str] = {}
    last: str | None = None
    for word in query.words:
        for kind, text in query_parts(word) or [("word", word)]:
            seen.setdefault(text.casefold(), text)
            last = text.casefold() if kind == "word" else None
    prefixed = seen.get(last) if query.prefix and last is not None else None
    words = sorted(seen.values(), key=len, reverse=True)[:ANY_WORDS_OFFERED]
    if prefixed is None or prefixed not in words:
        return words, False
    return [w for w in words if w != prefixed] + [prefixed], True  # Match's prefix is its last word's


def any_query(query: ParsedQuery) -> ParsedQuery | None:
    """`query` as the any-word list searches it (one Match of its parts OR-ed, the store keeping
    ANY_WORDS_MAX of them), or None for a query of at most one part: its keyword search is that
    list."""
    words, prefix = any_words(query)
    if len(words) <= 1:
        return None
    return replace(query, words=words, prefix=prefix, match=Match(tuple(words), prefix, any=ANY_WORDS_MAX),
                   terms=[])


async def any_word(run: Callable[[ParsedQuery], Awaitable[Outcome]], query: ParsedQuery,
                   all_words: Outcome) -> Outcome:
    """The best rows holding any of the query's words, by BM25 (`rank`: lower is better); `run` is
    keyword search of one query over the same scopes, by relevance. `all_words` is keyword search
    of the whole query, already run: a query of one part is that."""
    ored = any_query(query)
    return all_words if ored is None else await run(ored)


def keep_in_top(ranked: list[Hit], best: Hit | None, place: int = 3) -> list[Hit]:
    """`ranked` with keyword mode's best hit (every word, ranked first) at `place` at worst."""
    if best is None:
        return ranked
    at = next((i for i, h in enumerate(ranked) if (h.agent_id, h.rid) == (best.agent_id, best.rid)), None)
    if at is not None and at < place:
        return ranked
    moved = ranked[at] if at is not None else replace(best, matched_by=("keyword",))
    rest = [h for i, h in enumerate(ranked) if i != at]
    if len(rest) >= place:  # its score as the one it now comes before: scores still fall down the list
        moved.rank = min(moved.rank, rest[place - 1].rank)
    return rest[:place - 1] + [moved] + rest[place - 1:]
