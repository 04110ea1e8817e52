"""Hybrid's keyword half as the messages holding any of the query's words (search/anyword.py), on
both stores with the switch on (it ships off: see ANY_WORD_HALF), and keyword mode's top hit kept
in hybrid's top 3 whatever the fusion does."""

from __future__ import annotations

from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.search import meaning
from sessionsearch.search.anyword import ANY_WORDS_MAX, keep_in_top, word_queries
from sessionsearch.search.outcome import Hit
from sessionsearch.search.query import parse_query

from ..helpers import chain, engine_at, ids
from .test_semantic_search import KEY, _corpus


async def test_the_keyword_half_holds_messages_with_only_some_of_the_words(backend, monkeypatch):
    monkeypatch.setattr(meaning, "ANY_WORD_HALF", True)
    async with engine_at(backend) as engine:
        await _corpus(engine)
        question = "which codename did we pick for zxqvelt rotations"
        assert ids(await engine.search(SearchParams(query=question))) == []  # keyword mode: every word, none holds them all
        found = {h["messageId"]: h for h in (await engine.search(SearchParams(query=question, mode="hybrid")))["results"]}
        assert "keyword" in found["m7"]["matchedBy"]
        monkeypatch.setattr(meaning, "ANY_WORD_HALF", False)
        found = {h["messageId"]: h for h in (await engine.search(SearchParams(query=question, mode="hybrid")))["results"]}
        assert "keyword" not in found.get("m7", {"matchedBy": []})["matchedBy"]


async def test_the_keyword_half_keeps_the_scope_rules(backend, monkeypatch):
    monkeypatch.setattr(meaning, "ANY_WORD_HALF", True)
    async with engine_at(backend) as engine:
        await _corpus(engine)
        await engine.append(AppendParams(sessionKey="agent:main:other", events=chain("o", [("user", "zxqvelt codename for the other team")])))
        await engine.embed_pending()
        found = await engine.search(SearchParams(query="zxqvelt password kubernetes", mode="hybrid", role="assistant", sessionKeys=[KEY], limit=25))
        keyword = {h["messageId"] for h in found["results"] if "keyword" in h["matchedBy"]}
        assert keyword == {"m8", "m10"} and all(h["role"] == "assistant" and h["sessionKey"] == KEY for h in found["results"])
        assert "m7" not in ids(found) and "o1" not in ids(found)  # a user message, another session


async def test_a_message_holding_every_word_stays_in_the_top_three(backend, monkeypatch):
    monkeypatch.setattr(meaning, "ANY_WORD_HALF", True)
    async with engine_at(backend) as engine:
        await _corpus(engine)
        keyword = await engine.search(SearchParams(query="password letters"))
        assert ids(keyword)[:1] == ["m9"]
        assert "m9" in ids(await engine.search(SearchParams(query="password letters", mode="hybrid")))[:3]


def _hit(rid: int, rank: float) -> Hit:
    return Hit("main", rid, rank, f"m{rid}", 0, "")


def test_keyword_modes_first_hit_is_moved_up_to_third_with_a_falling_score():
    ranked = [_hit(i, -1.0 + i / 100) for i in range(1, 8)]
    best = _hit(6, -9.0)
    kept = keep_in_top(ranked, best)
    assert [h.rid for h in kept] == [1, 2, 6, 3, 4, 5, 7]
    assert [h.rank for h in kept] == sorted(h.rank for h in kept)
    outside = keep_in_top(ranked[:4], _hit(42, -9.0))
    assert [h.rid for h in outside] == [1, 2, 42, 3, 4] and outside[2].matched_by == ("keyword",)
    assert keep_in_top(ranked, ranked[1]) == ranked


def test_each_distinct_word_is_searched_the_longest_first_up_to_a_cap():
    query = parse_query("Zxqvelt the THE rotation " + " ".join(f"w{i:02d}" for i in range(20)) + " codena",
                        prefix=True)
    parts = word_queries(query)
    assert len(parts) == ANY_WORDS_MAX and [p.words[0] for p in parts[:3]] == ["rotation", "Zxqvelt", "codena"]
    assert [p.text for p in parts if p.prefix] == ["codena"]  # the last word keeps its prefix matching
    assert sum(p.text.casefold() == "the" for p in parts) <= 1
    assert all(p.match is not None and p.match.words == (p.text,) for p in parts)
    assert [p.text for p in word_queries(parse_query("zxqvelt", prefix=False))] == ["zxqvelt"]
