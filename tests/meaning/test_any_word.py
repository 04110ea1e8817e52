"""Hybrid's keyword half as the messages holding any of the query's words (search/anyword.py), on
both stores: a natural question whose answer holds only some of its words is found, keyword mode's
top hit stays in hybrid's top 3 whatever the fusion does, and every scope, visibility and branch
rule of keyword search holds for the half."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from sessionsearch.protocol import AppendParams, SearchParams, UpsertParams
from sessionsearch.search import meaning
from sessionsearch.search.anyword import ANY_WORDS_MAX, any_query, any_word, any_words, keep_in_top
from sessionsearch.search.meaning import fuse
from sessionsearch.search.outcome import Hit
from sessionsearch.search.query import build_match, parse_query

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


def test_each_distinct_word_is_ored_the_longest_first_up_to_a_cap():
    query = parse_query("Zxqvelt the THE rotation " + " ".join(f"w{i:02d}" for i in range(20)) + " codena",
                        prefix=True)
    words, prefix = any_words(query)
    assert len(words) == 24 and words[:2] == ["rotation", "Zxqvelt"]
    assert prefix and words[-1] == "codena"  # the last word keeps its prefix matching, last in the Match
    assert sum(w.casefold() == "the" for w in words) <= 1
    ored = any_query(query)
    assert ored is not None and ored.match is not None and ored.match.words == tuple(words)
    assert ored.match.any == ANY_WORDS_MAX
    # a store that cannot say which words are rare ORs the longest
    assert ored.match.cut().words == ("rotation", "Zxqvelt", "the", *(f"w{i:02d}" for i in range(8)), "codena")
    assert ored.match.cut().prefix
    rare_first = ored.match.cut([float(len(words) - i) for i in range(len(words))])  # the later, the rarer
    assert rare_first.words == (*(f"w{i:02d}" for i in range(9, 20)), "codena") and rare_first.prefix
    assert any_query(parse_query("zxqvelt", prefix=False)) is None  # one word: keyword search is the list
    # a word's CJK run and the text beside it are two phrases keyword search ANDs: here each is OR-ed
    assert any_words(parse_query("东京tower 大阪", prefix=False)) == (["tower", "东京", "大阪"], False)


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


# a corpus of varied word frequencies (a word in most rows, words in a few, CJK runs, words of one
# role or one agent), fewer than FUSE_DEPTH rows holding any one word in any scope: each word's own
# keyword search then has every row holding it, and their sum is the whole any-word list
_VOCAB = ["the", "the", "the", "and", "deploy", "deploy", "rollback", "zxqvelt", "kubernetes", "cluster",
          "password", "rotation", "staging", "invoice", "quarterly", "东京", "大阪の天気", "per-session", "flaky",
          "migration", "postgres", "sqlite", "retries", "backoff", "kibble", "mortgage", "Ünïcode"]
_QUERIES = ["which zxqvelt cluster did the deploy break", "rollback the staging migration and retries",
            "东京 cluster deploy", "大阪 the weather per-session", "the and", "postgres sqlite invoice kibble",
            "quarterly mortgage nothingmatches", "flaky back", "Ünïcode deploy password rotation"]


async def _varied_corpus(engine) -> None:
    rng = random.Random(39)
    for agent in ("main", "ops"):
        for s in range(3):
            texts = []
            for _ in range(7):
                words = [rng.choice(_VOCAB) for _ in range(rng.randint(2, 12))]
                texts.append((rng.choice(["user", "assistant"]), " ".join(words)))
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:s{s}",
                                             events=chain(f"{agent[0]}{s}-", texts, ts=1_700_000_000_000 + s * 1000)))
    await engine.embed_pending()


@pytest.mark.parametrize("scope", [{}, {"role": "assistant"}, {"agentId": "ops"},
                                   {"sessionKeys": ["agent:main:s0", "agent:ops:s2"]},
                                   {"since": 1_700_000_000_900, "until": 1_700_000_002_004}, {"match": "prefix"}])
async def test_the_ored_list_is_each_words_bm25_summed(backend, monkeypatch, scope):
    """The any-word list, one OR-ed statement, against each word's own keyword search with the
    words' scores summed (the per-word algorithm it replaced): the same rows, in the same order,
    with the same scores to float error, under each scope rule."""
    compared = []

    async def both(run, query, all_words):
        found = await any_word(run, query, all_words)
        words, prefix = any_words(query)
        summed: dict[tuple[str, int], float] = {}
        for word in words:
            last = prefix and word == words[-1]
            one = await run(replace(query, text=word, words=[word], prefix=last, match=build_match([word], last),
                                    terms=[]))
            assert not one.more  # every row holding the word: the sum is whole
            for hit in one.hits:
                summed[(hit.agent_id, hit.rid)] = summed.get((hit.agent_id, hit.rid), 0.0) + hit.rank
        compared.append((query.text, [((h.agent_id, h.rid), h.rank) for h in found.hits], summed))
        return found

    monkeypatch.setattr(meaning, "any_word", both)
    async with engine_at(backend) as engine:
        await _varied_corpus(engine)
        for question in _QUERIES:
            await engine.search(SearchParams(query=question, mode="hybrid", **scope))
    assert len(compared) == len(_QUERIES) and any(len(ored) > 5 for _, ored, _ in compared)
    for text, ored, summed in compared:
        assert [key for key, _ in ored] == sorted(summed, key=lambda key: summed[key])[:len(ored)] or all(
            abs(rank - summed[key]) < 1e-9 for key, rank in ored), text  # a tie within float error may swap
        assert {key for key, _ in ored} == set(summed), text
        assert all(abs(rank - summed[key]) <= 1e-9 * max(1.0, abs(rank)) for key, rank in ored), text
        assert all(a[1] <= b[1] for a, b in zip(ored, ored[1:])), text


async def test_query_syntax_in_the_words_is_searched_as_text(backend):
    """Each OR-ed word is quoted as keyword search quotes it: FTS5 and tsquery syntax in a question
    are words (or nothing), never operators."""
    async with engine_at(backend) as engine:
        await _corpus(engine)
        for question in ['zxqvelt" OR "password', "zxqvelt' | 'password", "zxqvelt NEAR(password) *", "zxqvelt !:* (&"]:
            found = await engine.search(SearchParams(query=question, mode="hybrid", match="prefix"))
            assert "m7" in ids(found)[:3], question


async def test_of_many_words_the_rarest_are_ored_where_the_store_counts_them(backend):
    """Past ANY_WORDS_MAX words the store keeps the rarest by its kept counts (SQLite: the term
    bounds; PostgreSQL: the counts of its last searches, none on the first), not the longest: a
    long word in every row gives its place to a short one only the answer holds."""
    async with engine_at(backend) as engine:
        filler = [("assistant", f"extraordinarily ordinary note {i} about nothing much") for i in range(12)]
        rare = [("assistant", f"extraordinarily the word rarewordn{i:02d} once") for i in range(11)]
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [*filler, *rare,
                                                                           ("assistant", "answer: qzx")])))
        await engine.embed_pending()
        question = "extraordinarily " + " ".join(f"rarewordn{i:02d}" for i in range(11)) + " qzx"
        for _ in range(2):  # PostgreSQL's first search counts the words it ORs, longest first
            found = await engine.search(SearchParams(query=question, mode="hybrid", limit=25))
        keyword = {h["messageId"] for h in found["results"] if "keyword" in h["matchedBy"]}
        assert "m24" in keyword  # the answer, holding only the shortest word
        assert not keyword & {f"m{i}" for i in range(1, 13)}  # the common long word was left out
