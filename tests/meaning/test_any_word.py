"""Hybrid's keyword half as the messages holding any of the query's words (search/anyword.py), on
both stores: a natural question whose answer holds only some of its words is found, keyword mode's
top hit stays in hybrid's top 3 whatever the fusion does, and every scope, visibility and branch
rule of keyword search holds for the half."""

from __future__ import annotations

from sessionsearch.protocol import AppendParams, SearchParams, UpsertParams
from sessionsearch.search.anyword import ANY_WORDS_MAX, keep_in_top, word_queries
from sessionsearch.search.meaning import fuse
from sessionsearch.search.outcome import Hit
from sessionsearch.search.query import parse_query

from ..helpers import chain, engine_at, ids, leaf, msg
from .test_semantic_search import KEY, _corpus


async def test_a_question_whose_answer_holds_only_some_of_its_words_is_found_by_hybrid(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine)
        question = "which codename did we pick for zxqvelt rotations"
        assert ids(await engine.search(SearchParams(query=question))) == []  # keyword mode: every word, none holds them all
        found = await engine.search(SearchParams(query=question, mode="hybrid"))
        assert ids(found)[:1] == ["m7"] and found["results"][0]["matchedBy"] == ["keyword", "semantic"]
        # the question's common words ("for", "the") found rows too, but below the rare word's
        assert all(h["score"] < found["results"][0]["score"] for h in found["results"][1:])


async def test_rows_holding_only_common_words_do_not_pass_the_nearest_one(backend):
    """A word in more than half the rows weighs next to nothing in BM25 (FTS5's floor on a word's
    weight): rows holding only such words of the question are no keyword evidence, and the answer,
    holding none of its words, stays first as semantic search ranks it."""
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [
            ("assistant", "Dentist appointment moved to Thursday at nine"),
            ("assistant", "the appointment reminder app did not ring this morning"),
            ("assistant", "the cat refuses to eat the new kibble"),
            ("assistant", "the laptop battery drains in two hours"),
            ("assistant", "pack the sunscreen for the beach trip"),
            ("assistant", "the quarterly report is due to the board")])))
        await engine.embed_pending()
        question = "when will the tooth doctor see me"
        assert ids(await engine.search(SearchParams(query=question, mode="semantic")))[:1] == ["m1"]
        hybrid = await engine.search(SearchParams(query=question, mode="hybrid"))
        assert ids(hybrid)[:1] == ["m1"] and all(h["matchedBy"] == ["semantic"] for h in hybrid["results"])


async def test_the_keyword_half_keeps_the_scope_rules(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine)
        await engine.append(AppendParams(sessionKey="agent:main:other", events=chain("o", [("user", "zxqvelt codename for the other team")])))
        await engine.embed_pending()
        found = await engine.search(SearchParams(query="zxqvelt password kubernetes", mode="hybrid", role="assistant", sessionKeys=[KEY], limit=25))
        keyword = {h["messageId"] for h in found["results"] if "keyword" in h["matchedBy"]}
        assert keyword == {"m8", "m10"} and all(h["role"] == "assistant" and h["sessionKey"] == KEY for h in found["results"])
        assert "m7" not in ids(found) and "o1" not in ids(found)  # a user message, another session


async def test_the_keyword_half_keeps_the_visibility_and_branch_rules(backend):
    async with engine_at(backend, visibility="self") as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", [
            ("user", "which bank for the home loan?"), ("assistant", "the zxqvelt mortgage with the credit union"),
            ("user", "ok, go with it")])))
        await engine.append(AppendParams(sessionKey="agent:main:b", events=chain("b", [("user", "zxqvelt rotation plan for the staging cluster")])))
        await engine.append(AppendParams(sessionKey="agent:main:secret", events=chain("s", [("user", "zxqvelt secret notes")])))
        await engine.upsert_session(UpsertParams(sessionKey="agent:main:secret", incognito=True))
        # a rewind: a2 leaves the active branch of session a
        await engine.append(AppendParams(sessionKey="agent:main:a", events=[leaf("l1", "a3", "a1"), msg("n1", "assistant", "the bakery on the corner", "l1")]))
        await engine.reconcile_pending()
        await engine.embed_pending()
        question = "what was the zxqvelt plan for the mortgage"
        operator = await engine.search(SearchParams(query=question, mode="hybrid", limit=25))
        keyword = {h["messageId"] for h in operator["results"] if "keyword" in h["matchedBy"]}
        assert "b1" in keyword and "a2" not in ids(operator) and "s1" not in ids(operator)
        own = await engine.search(SearchParams(query=question, mode="hybrid", limit=25, requester={"sessionKey": "agent:main:a"}))
        assert {h["sessionKey"] for h in own["results"]} <= {"agent:main:a"} and "b1" not in ids(own)


async def test_a_message_holding_every_word_stays_in_the_top_three(backend):
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


def test_fusion_scales_each_list_and_weighs_the_keyword_share_by_its_cube():
    semantic = [_hit(1, -0.9), _hit(2, -0.8), _hit(3, -0.5)]
    keyword = [_hit(3, -10.0), _hit(4, -5.0)]
    fused = fuse(keyword, semantic, 0.75)
    score = {h.rid: -h.rank for h in fused}
    assert score[1] == 1.0 and abs(score[2] - 0.75) < 1e-9  # (0.8 - 0.5) / (0.9 - 0.5)
    assert score[3] == 0.75 and abs(score[4] - 0.75 * 0.5 ** 3) < 1e-9  # least similar 0, best keyword row 1
    assert [h.rid for h in fused] == [1, 2, 3, 4] and fused[2].matched_by == ("keyword", "semantic")
    alone = fuse([], [_hit(7, -0.3)], 0.75)
    assert [(h.rid, h.rank) for h in alone] == [(7, -1.0)]  # a list of one: its row is the best
