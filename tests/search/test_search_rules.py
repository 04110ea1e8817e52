"""sessions.search, rule by rule (SPEC §4), on real SQLite files."""

from __future__ import annotations

import json

import pytest

from sessionsearch import InvalidRequest, SearchTimeout
from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.store.base import Match
from sessionsearch.text.utf16 import utf16_len

from ..helpers import BASE_TS, chain, engine_at, ids, leaf, msg

KEY = "agent:main:main"

SPEC_TEXTS = [
    ("user", "Café notes: Per-session communication controls in UI"),
    ("assistant", "ΟΣ ος is Greek sigma, final and not"),
    ("user", "a literal word here"),
    ("assistant", "nothing else"),
]


async def _spec_corpus(engine):
    await engine.append(AppendParams(sessionKey=KEY, events=chain("m", SPEC_TEXTS), sessionId="s1"))


async def test_exact_words_do_not_match_a_prefix(backend):
    async with engine_at(backend) as engine:
        await _spec_corpus(engine)
        assert ids(await engine.search(SearchParams(query="per session communi"))) == []


async def test_prefix_match_lets_the_last_word_be_a_prefix(backend):
    async with engine_at(backend) as engine:
        await _spec_corpus(engine)
        assert ids(await engine.search(SearchParams(query="per-session communi", match="prefix"))) == ["m1"]
        assert ids(await engine.search(SearchParams(query="per-session communi"))) == []


async def test_case_and_diacritics_fold(backend):
    async with engine_at(backend) as engine:
        await _spec_corpus(engine)
        assert ids(await engine.search(SearchParams(query="CAFE communication"))) == ["m1"]
        assert ids(await engine.search(SearchParams(query="οσ"))) == ["m2"]


async def test_all_words_must_match(backend):
    async with engine_at(backend) as engine:
        await _spec_corpus(engine)
        assert ids(await engine.search(SearchParams(query="café greek"))) == []
        assert ids(await engine.search(SearchParams(query="café controls"))) == ["m1"]


async def test_query_syntax_words_are_literal_text(backend):
    async with engine_at(backend) as engine:
        await _spec_corpus(engine)
        await engine.append(AppendParams(sessionKey=KEY, events=chain("x", [("user", "salt or pepper near the text: literal (sic)")], parent="m4")))
        expected = {  # as operators these would be syntax errors, or would widen or narrow the match
            "literal OR missing": [], "literal NEAR word": [], "salt OR pepper": ["x1"], "NOT": ["m2"],
            "literal NEAR": ["x1"], "text:literal": ["x1"], "(sic)": ["x1"], "literal*": ["x1", "m3"],
            '"literal"': ["x1", "m3"], '"': [], "*": [], "(": [], ":": [], "OR": ["x1"]}
        found = {query: sorted(ids(await engine.search(SearchParams(query=query))), reverse=True) for query in expected}
        assert found == expected


async def test_quoted_and_starred_words_keep_their_letters(backend):
    async with engine_at(backend) as engine:
        await _spec_corpus(engine)
        assert ids(await engine.search(SearchParams(query='"literal"'))) == ["m3"]
        assert ids(await engine.search(SearchParams(query="literal*"))) == ["m3"]  # `*` is punctuation, not a prefix
        assert ids(await engine.search(SearchParams(query="liter*"))) == []


async def test_a_query_of_only_punctuation_finds_nothing_and_is_no_error(backend):
    async with engine_at(backend) as engine:
        await _spec_corpus(engine)
        assert (await engine.search(SearchParams(query='" --- ***')))["results"] == []


async def test_hyphenated_word_matches_its_parts_in_sequence(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "per-session"), ("user", "session per")])))
        assert ids(await engine.search(SearchParams(query="per-session"))) == ["m1"]


async def test_empty_and_overlong_queries_are_errors(backend):
    async with engine_at(backend) as engine:
        with pytest.raises(InvalidRequest, match="^query must not be empty$"):
            await engine.search(SearchParams(query="   "))
        with pytest.raises(InvalidRequest, match="^query must not exceed 4096 characters$"):
            await engine.search(SearchParams(query="a" * 4097))
        await engine.search(SearchParams(query="a" * 4096))
        with pytest.raises(InvalidRequest, match="^query must not exceed 4096 characters$"):
            await engine.search(SearchParams(query="😀" * 2049))  # 4098 UTF-16 code units


@pytest.mark.parametrize("limit", [0, 26, -1, "5", 2.5, True])
async def test_limit_outside_1_to_25_is_an_error(backend, limit):
    async with engine_at(backend) as engine:
        with pytest.raises(InvalidRequest) as err:
            await engine.search(SearchParams(query="x", limit=limit))
        assert err.value.field == "limit"


async def test_request_needs_exactly_one_of_query_and_queries(backend):
    async with engine_at(backend) as engine:
        with pytest.raises(InvalidRequest, match="exactly one"):
            await engine.search(SearchParams.of({}))
        with pytest.raises(InvalidRequest, match="exactly one"):
            await engine.search(SearchParams(query="a", queries=["b"]))
        with pytest.raises(InvalidRequest, match="queries"):
            await engine.search(SearchParams(queries=["a"] * 9))
        with pytest.raises(InvalidRequest, match="unknown field 'color'"):
            await engine.search(SearchParams(query="a", color="red"))


async def test_queries_answer_one_state_per_query(backend):
    async with engine_at(backend) as engine:
        await _spec_corpus(engine)
        result = await engine.search(SearchParams(queries=["café", "greek", "absent"]))
        assert [ids(state) for state in result["states"]] == [["m1"], ["m2"], []]


async def test_role_filter_narrows_to_that_role(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "budget plan"), ("assistant", "budget reply")])))
        assert ids(await engine.search(SearchParams(query="budget", role="user"))) == ["m1"]
        assert ids(await engine.search(SearchParams(query="budget", role="assistant"))) == ["m2"]


async def test_higher_score_is_better_and_results_are_ordered_by_it(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [
            ("user", "loan " + "filler " * 40), ("user", "loan loan loan"), ("user", "loan and other words")])))
        result = await engine.search(SearchParams(query="loan"))
        scores = [hit["score"] for hit in result["results"]]
        assert ids(result)[0] == "m2"
        assert scores == sorted(scores, reverse=True) and scores[0] > scores[-1] > 0


async def test_ties_go_to_the_newer_message_then_message_id(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=[msg("b", "user", "same words", None, ts=BASE_TS + 5),
                                  msg("a", "user", "same words", "b", ts=BASE_TS + 5),
                                  msg("c", "user", "same words", "a", ts=BASE_TS + 9)]))
        assert ids(await engine.search(SearchParams(query="same"))) == ["c", "a", "b"]


async def test_ties_across_the_limit_cut_follow_the_tie_rule(backend):
    async with engine_at(backend) as engine:
        events, parent = [], None
        for i in range(40):  # identical texts: all hits tie; the newest must come first
            events.append(msg(f"m{i:02d}", "user", "ok thanks", parent, ts=BASE_TS + (i * 7919) % 40))
            parent = f"m{i:02d}"
        await engine.append(AppendParams(sessionKey=KEY, events=events))
        result = await engine.search(SearchParams(query="thanks", limit=5))
        assert [h["timestamp"] - BASE_TS for h in result["results"]] == [39, 38, 37, 36, 35]
        assert result["truncated"] is True


async def test_ties_longer_than_the_sorter_margin_still_follow_the_tie_rule(backend):
    async with engine_at(backend) as engine:
        events, parent = [], None
        for i in range(300):
            events.append(msg(f"m{i:03d}", "user", "same words", parent, ts=BASE_TS + (i * 7919) % 300))
            parent = f"m{i:03d}"
        await engine.append(AppendParams(sessionKey=KEY, events=events))
        result = await engine.search(SearchParams(query="same", limit=25))
        assert [h["timestamp"] - BASE_TS for h in result["results"]] == list(range(299, 274, -1))
        assert result["truncated"] is True


async def test_recent_order_is_newest_first(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=[msg("old", "user", "loan loan loan", None, ts=BASE_TS),
                                  msg("new", "user", "loan " + "x " * 50, "old", ts=BASE_TS + 1000)]))
        assert ids(await engine.search(SearchParams(query="loan"))) == ["old", "new"]
        assert ids(await engine.search(SearchParams(query="loan", order="recent"))) == ["new", "old"]


async def test_recent_ties_on_the_timestamp_go_by_message_id_beyond_the_sorter_margin(backend):
    async with engine_at(backend) as engine:
        events, parent = [], None
        for i in range(200):  # 200 hits on one millisecond, written in a scrambled id order
            mid = f"m{(i * 7919) % 200:03d}"
            events.append(msg(mid, "user", "same words " + "x " * (i % 3), parent, ts=BASE_TS))
            parent = mid
        events.append(msg("newest", "user", "same words", parent, ts=BASE_TS + 1))
        await engine.append(AppendParams(sessionKey=KEY, events=events))
        # messages without the words, so that theirs weigh something in BM25 (in every message, they
        # would score ~0 and any two scores would look alike)
        await engine.append(AppendParams(sessionKey="agent:main:other", events=chain("o", [("user", "other text")] * 400)))
        recent = await engine.search(SearchParams(query="same", order="recent", limit=10))
        assert ids(recent) == ["newest"] + [f"m{i:03d}" for i in range(9)] and recent["truncated"]
        relevance = {h["messageId"]: h["score"] for h in (await engine.search(SearchParams(query="same words", limit=25)))["results"]}
        recent_scores = {h["messageId"]: h["score"]
                         for h in (await engine.search(SearchParams(query="same words", order="recent", limit=25)))["results"]}
        both = sorted(relevance.keys() & recent_scores.keys())  # the shortest texts, newest among them
        assert "newest" in both and len(both) > 1
        assert {m: recent_scores[m] for m in both} == {m: relevance[m] for m in both}  # the same BM25 score


async def test_a_window_turning_dirty_between_searches_is_left_out_at_once(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "alpha plan"), ("assistant", "beta plan")])))
        assert sorted(ids(await engine.search(SearchParams(query="plan")))) == ["m1", "m2"]  # nothing needs reconciling
        # a rewind: the window needs reconciliation, and its index rows (beta's too) are left out
        await engine.append(AppendParams(sessionKey=KEY, events=[leaf("l1", "m2", "m1"), msg("n1", "assistant", "gamma plan", "l1")]))
        result = await engine.search(SearchParams(query="plan"))
        assert ids(result) == [] and result["indexing"] is True
        await engine.reconcile_pending()
        assert sorted(ids(await engine.search(SearchParams(query="plan")))) == ["m1", "n1"]


async def test_scoped_search_reports_the_same_score_as_unscoped(backend):
    async with engine_at(backend) as engine:
        for n in range(5):
            await engine.append(AppendParams(sessionKey=f"agent:main:s{n}", events=chain(f"k{n}-", [("user", f"mortgage rate {n}"),
                                                                    ("assistant", "other text")])))
        unscoped = {h["messageId"]: h["score"] for h in (await engine.search(SearchParams(query="mortgage")))["results"]}
        scoped = await engine.search(SearchParams(query="mortgage", sessionKeys=["agent:main:s3"]))
        assert ids(scoped) == ["k3-1"]
        assert scoped["results"][0]["score"] == unscoped["k3-1"]


async def test_session_keys_are_literal_not_wildcards(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a_b", events=chain("x", [("user", "alpha")])))
        await engine.append(AppendParams(sessionKey="agent:main:aXb", events=chain("y", [("user", "alpha")])))
        result = await engine.search(SearchParams(query="alpha", sessionKeys=["agent:main:a_b"]))
        assert [h["sessionKey"] for h in result["results"]] == ["agent:main:a_b"]
        assert (await engine.search(SearchParams(query="alpha", sessionKeys=["agent:main:a%"])))["results"] == []


async def test_limit_and_truncated(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", f"common word {i}") for i in range(30)])))
        result = await engine.search(SearchParams(query="common", limit=25))
        assert len(result["results"]) == 25 and result["truncated"] is True
        exact = await engine.search(SearchParams(query="common", limit=25, sessionId=result["results"][0]["sessionId"]))
        assert len(exact["results"]) == 25
        few = await engine.search(SearchParams(query="7"))
        assert ids(few) == ["m8"] and "truncated" not in few


async def test_snippet_is_cut_to_300_utf16_units_around_the_match(backend):
    async with engine_at(backend) as engine:
        text = "😀" * 400 + " needle " + "word " * 300
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", text)])))
        snippet = (await engine.search(SearchParams(query="needle")))["results"][0]["snippet"]
        assert "needle" in snippet
        assert utf16_len(snippet) <= 301
        assert snippet.startswith("… ") and snippet.endswith(" …")
        assert not any(0xD800 <= ord(ch) <= 0xDFFF for ch in snippet)  # no half of a surrogate pair


async def test_short_text_snippet_is_the_whole_text(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "a short   message\nwith lines")])))
        assert (await engine.search(SearchParams(query="short")))["results"][0]["snippet"] == "a short message with lines"


async def test_response_stays_within_32_kib(backend):
    async with engine_at(backend) as engine:
        # 25 hits with long session keys and full-length CJK snippets (3 bytes a character)
        for n in range(25):
            key = f"agent:main:{n:02d}-" + "k" * 480
            await engine.append(AppendParams(sessionKey=key, events=chain(f"m{n}-", [("user", "hit " + "漢" * 400)])))
        result = await engine.search(SearchParams(query="hit", limit=25))
        assert len(json.dumps(result, ensure_ascii=False).encode()) <= 32 * 1024
        assert result["truncated"] is True and 0 < len(result["results"]) < 25
        for hit in result["results"]:  # dropped whole, never cut mid-field
            assert set(hit) == {"sessionKey", "sessionId", "messageId", "role", "timestamp", "snippet", "score"}
            assert len(hit["sessionKey"]) > 480


async def test_cjk_words_match_as_substrings_and_other_words_as_words(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "私は東京に住んでいます"), ("assistant", "我们明天去北京开会"),
                                             ("user", "Tokyo trip 東京タワー")])))
        assert sorted(ids(await engine.search(SearchParams(query="東京")))) == ["m1", "m3"]
        assert ids(await engine.search(SearchParams(query="北京"))) == ["m2"]
        assert ids(await engine.search(SearchParams(query="trip 東京"))) == ["m3"]  # other words keep word matching
        assert ids(await engine.search(SearchParams(query="tri 東京"))) == []


async def test_a_cjk_word_that_is_also_a_whole_run_finds_the_longer_runs_too(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "東京"), ("user", "私は東京に住んでいます")])))
        assert sorted(ids(await engine.search(SearchParams(query="東京")))) == ["m1", "m2"]


async def test_cjk_substrings_stay_within_the_scope(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", [("user", "北京开会")])))
        await engine.append(AppendParams(sessionKey="agent:main:b", events=chain("b", [("user", "北京开会")])))
        result = await engine.search(SearchParams(query="北京", sessionKeys=["agent:main:b"]))
        assert ids(result) == ["b1"]


async def test_snippets_keep_credentials_unless_redaction_is_on(backend):
    secret = "deploy with API_KEY=sk-abcdefghijklmnopqrstuvwx and Authorization: Bearer abcdef123456789"
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", secret)])))
        assert (await engine.search(SearchParams(query="deploy")))["results"][0]["snippet"] == secret
    async with engine_at(backend, redact_snippets=True) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", secret)])))
        snippet = (await engine.search(SearchParams(query="deploy")))["results"][0]["snippet"]
        assert "sk-abc" not in snippet and "abcdef123456789" not in snippet
        assert "API_KEY=[REDACTED]" in snippet and "deploy with" in snippet


async def test_a_search_past_its_time_budget_is_a_timeout_not_a_hang(backend):
    async with engine_at(backend) as engine:
        # a phrase of 3 bigrams in every row: positions read; the search takes 40x the budget or more
        texts = [("user", "日本語のテキスト" * 10)] * 2000
        for start in range(0, 12000, 2000):
            await engine.append(AppendParams(sessionKey=f"agent:main:s{start}", events=chain(f"m{start}-", texts)))
        assert (await engine.search(SearchParams(query="テキスト")))["results"]  # warm: the catalog is read
        engine.settings = engine.settings.replace(search_time_limit_ms=5)
        with pytest.raises(SearchTimeout) as err:
            await engine.search(SearchParams(query="テキスト"))
        assert err.value.message == "search timed out; retry with a sessionKey or more specific keywords"
        engine.settings = engine.settings.replace(search_time_limit_ms=60_000)
        assert (await engine.search(SearchParams(query="テキスト")))["results"]  # the reader is usable again


async def test_the_progress_handler_interrupts_a_long_statement(tmp_path):  # SQLite's own mechanism
    import time
    async with engine_at(tmp_path) as engine:
        texts = [("user", "日本語のテキスト" * 10)] * 2000
        for start in range(0, 12000, 2000):
            await engine.append(AppendParams(sessionKey=f"agent:main:s{start}", events=chain(f"m{start}-", texts)))
        store = await engine.store("main")
        with pytest.raises(SearchTimeout):
            async with store.reader(time.monotonic() + 10) as reader:
                reader.deadline = time.monotonic() + 0.002  # passes while the statement runs
                await store.search_top(reader, Match(("テキスト",)), k=10, order="relevance", include=None,
                                       exclude=None, role=None)
