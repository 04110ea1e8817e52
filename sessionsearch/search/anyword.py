"""Hybrid's keyword half (SPEC §4 `mode`): the messages holding any of the query's words, ranked by
BM25, so the rare words weigh most.

A question asked in natural language rarely has every one of its words in its answer, so keyword
mode's all-words list is mostly empty for it. This list is the union of each word's own keyword
search, scored by the sum of the word's BM25 contributions (BM25 is a sum over the query's words,
on both stores), so every scope, visibility, branch, role and time rule of keyword search holds
for it unchanged. A row past one word's top `depth` loses that word's share: the list is BM25 of
the OR-ed words for the rows that matter, not for every row. The words searched are at most
ANY_WORDS_MAX, the longest first (long words are the rare ones, mostly); a query of one word is
its keyword search.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from .query import build_match

if TYPE_CHECKING:
    from .outcome import Hit, Outcome
    from .query import ParsedQuery

ANY_WORDS_MAX = 12


def word_queries(query: ParsedQuery) -> list[ParsedQuery]:
    """One query per distinct word (case folded), at most ANY_WORDS_MAX, the longest first; the last
    word keeps the query's prefix matching."""
    last = query.words[-1] if query.words else None
    seen: dict[str, str] = {}
    for word in query.words:
        seen.setdefault(word.casefold(), word)
    words = sorted(seen.values(), key=len, reverse=True)[:ANY_WORDS_MAX]
    return [replace(query, text=w, words=[w], prefix=query.prefix and w == last,
                    match=build_match([w], query.prefix and w == last), terms=[]) for w in words]


async def any_word(run: Callable[[ParsedQuery], Awaitable[Outcome]], query: ParsedQuery,
                   all_words: Outcome, depth: int) -> Outcome:
    """The best `depth` rows holding any of the query's words, by summed BM25 (`rank`: lower is
    better); `run` is keyword search of one query over the same scopes. `all_words` is keyword
    search of the whole query, already run: a query of one word is that."""
    from .outcome import Outcome

    parts = word_queries(query)
    if len(parts) <= 1:
        return all_words
    out = Outcome(dirty={a: set(w) for a, w in all_words.dirty.items()})
    rank: dict[tuple[str, int], float] = {}
    first: dict[tuple[str, int], Hit] = {}
    for part in parts:  # one after another: each fans out over the agents already
        found = await run(part)
        out.more |= found.more
        for agent_id, wids in found.dirty.items():
            out.dirty.setdefault(agent_id, set()).update(wids)
        for hit in found.hits:
            key = (hit.agent_id, hit.rid)
            rank[key] = rank.get(key, 0.0) + hit.rank
            first.setdefault(key, hit)
    hits = []
    for key, hit in first.items():
        hit.rank = rank[key]
        hits.append(hit)
    hits.sort(key=lambda h: (h.rank, -h.ts, h.message_id))
    out.more |= len(hits) > depth
    out.hits = hits[:depth]
    return out


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
