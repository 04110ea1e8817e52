"""Indexed CJK (SPEC §4, docs/cjk.md): every run of Han, Hiragana, Katakana and Hangul is
searchable as a substring of any length through the index, each word of a query its own way."""

from __future__ import annotations

import asyncio
import itertools
import random
import re
import sqlite3
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionsearch import Engine, Settings
from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.store.sqlite import search as store_module
from sessionsearch.store.sqlite.migrations import MIGRATIONS
from sessionsearch.text.cjk import index_text
from sessionsearch.text.utf16 import utf16_len

from ..helpers import chain, engine_at, ids, undo_meaning_index, wait_until
from ..server import Server

KEY = "agent:main:main"


async def _found(engine, query: str, **body) -> list[str]:
    return sorted(ids(await engine.search(SearchParams.of({"query": query, "limit": 25, **body}))))


async def test_a_run_is_found_by_any_substring_never_across_two_runs(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "开会 x 会议"), ("user", "明天开会议程"), ("user", "会議室")])))
        assert await _found(engine, "开会议") == ["m2"]  # not m1: its runs are 开会 and 会议
        assert await _found(engine, "会议") == ["m1", "m2"]
        assert await _found(engine, "議") == ["m3"]
        assert await _found(engine, "会") == ["m1", "m2", "m3"]
        assert await _found(engine, "明天开会议程") == ["m2"]  # the whole run
        assert await _found(engine, "天开会议程啊") == []  # longer than any run holding it


async def test_a_mixed_query_is_an_and_of_its_words_each_matched_its_own_way(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "Redis 部署失败了"), ("user", "部署失败"),
                                             ("user", "Redis is down"), ("user", "東京で meeting します"),
                                             ("user", "東京タワー"), ("user", "meetings in 東京")])))
        assert await _found(engine, "Redis 部署失败") == ["m1"]
        assert await _found(engine, "東京 meeting") == ["m4"]  # `meetings` is another word
        assert await _found(engine, "部署失败 down") == []


async def test_cjk_glued_to_latin_is_found_by_either_part(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "明天去东京meeting吧"), ("user", "a meeting"), ("user", "东京")])))
        assert await _found(engine, "东京") == ["m1", "m3"]
        assert await _found(engine, "meeting") == ["m1", "m2"]
        assert await _found(engine, "东京meeting") == ["m1"]  # both parts
        assert await _found(engine, "去东京meeting吧") == ["m1"]


async def test_full_width_latin_and_half_width_katakana_fold_like_their_usual_forms(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "Ｒｅｄｉｓ を再起動"), ("user", "redis restarted"),
                                             ("user", "ｶﾞｲﾄﾞを読む"), ("user", "ガイドブック")])))
        assert await _found(engine, "redis") == ["m1", "m2"]
        assert await _found(engine, "ＲＥＤＩＳ") == ["m1", "m2"]
        assert await _found(engine, "ガイド") == ["m3", "m4"]
        assert await _found(engine, "ｶﾞｲﾄﾞ") == ["m3", "m4"]
        assert await _found(engine, "ｲﾄﾞ") == ["m3", "m4"]
        assert await _found(engine, "カイト") == []  # voiced kana are other letters, on both backends


async def test_cjk_hits_are_ranked_by_bm25_over_their_shadow_terms(backend):
    async with engine_at(backend) as engine:
        filler = "。".join(["今日は天気がいいですね"] * 6)
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", f"{filler}東京"), ("user", "東京、東京、東京"), ("user", "京都")])))
        result = await engine.search(SearchParams(query="東京"))
        assert ids(result) == ["m2", "m1"]  # more occurrences in a shorter row first
        scores = [hit["score"] for hit in result["results"]]
        assert scores[0] > scores[1] > 0
        assert ids(await engine.search(SearchParams(query="東京", order="recent"))) == ["m2", "m1"]


async def test_a_cjk_snippet_centres_on_the_match_within_the_budget(backend):
    async with engine_at(backend) as engine:
        text = "あ" * 500 + "東京タワー" + "い" * 500
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", text)])))
        snippet = (await engine.search(SearchParams(query="京タ")))["results"][0]["snippet"]
        assert "東京タワー" in snippet and utf16_len(snippet) <= 300
        assert snippet.startswith("… ") and snippet.endswith(" …")


async def test_prefix_search_keeps_cjk_as_substrings_and_the_latin_tail_as_a_prefix(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "東京meeting"), ("user", "東京 meet"), ("user", "京都")])))
        assert await _found(engine, "東京mee", match="prefix") == ["m1", "m2"]
        assert await _found(engine, "京", match="prefix") == ["m1", "m2", "m3"]
        assert await _found(engine, "東京mee") == []


async def test_sessions_mode_and_ranges_count_cjk_hits_through_the_index(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", [("user", "東京開会"), ("user", "東京駅に"), ("user", "開会")])))
        await engine.append(AppendParams(sessionKey="agent:main:b", events=chain("b", [("user", "明日東京へ")])))
        result = await engine.search(SearchParams(query="東京", resultMode="sessions"))
        assert sorted((s["sessionKey"], s["hits"]) for s in result["results"]) == \
            [("agent:main:a", 2), ("agent:main:b", 1)]


async def test_common_cjk_unigrams_and_bigrams_get_postings_that_answer_their_searches(tmp_path, monkeypatch):
    calls = {"answered": [], "fell_back": []}
    original = store_module.hot_top

    async def counting(conn, token, *args, **kwargs):
        top = await original(conn, token, *args, **kwargs)
        calls["answered" if top is not None else "fell_back"].append(token)
        return top

    monkeypatch.setattr(store_module, "hot_top", counting)
    rng = random.Random(5)
    texts = [("user", "".join(rng.choice("東京大阪ガイ") for _ in range(rng.choice([1, 2, 5, 12, 30])))
              + rng.choice(["", " report", "・東京"])) for _ in range(150)]
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", texts)))
        built = set((await engine.optimize(min_docs=20, min_share=0.0))["agents"]["main"]["words"])
        assert {"東", "東京", "ガ", "ガイ", "report"} <= built and all(len(w) <= 2 for w in built if w != "report")
        # after the build: rows only the index log knows of, one of them above any other for 東京
        await engine.append(AppendParams(sessionKey="agent:main:late", events=chain("late", [("user", "東京東京東京"), ("user", "大阪")])))
        store = await engine.store("main")
        for query in ("東", "東京", "「東京」", "ｶﾞｲ", "阪", "report", "京大阪", "東京 report", "東京report"):
            await engine.search(SearchParams(query=query, limit=25))  # the store learns which words have postings
            hot = await engine.search(SearchParams(query=query, limit=25))
            store._hot_seen = (None, frozenset())  # this one search ranks with FTS5 alone
            assert hot == await engine.search(SearchParams(query=query, limit=25)), query
            assert hot["results"], query
        assert ids(await engine.search(SearchParams(query="東京", limit=1))) == ["late1"]
        # one or two characters (quoted, half-width or not) from postings; longer runs are phrases,
        # several words an AND, both for FTS5
        assert set(calls["answered"]) == {"東", "東京", "ガイ", "阪", "report"} and not calls["fell_back"]


@pytest.mark.parametrize("rows_in_sql", [False, True], ids=["executemany", "insert-select"])
async def test_reconciliation_indexes_the_shadow_tokens_either_way_it_inserts(tmp_path, rows_in_sql):
    engine = await Engine(tmp_path, settings=Settings(data_dir=str(tmp_path), reconcile_batch_rows=2),
                          reconcile_rows_in_sql=rows_in_sql).open()
    try:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "开会 x 会议"), ("user", "明天开会议程"), ("user", "plain words"),
                                             ("user", "Ｒｅｄｉｓ ｶﾞｲﾄﾞ")])), index=False)
        await engine.reconcile_pending()
        assert await _found(engine, "开会议") == ["m2"]
        assert await _found(engine, "会议") == ["m1", "m2"]
        assert await _found(engine, "words") == ["m3"]
        assert await _found(engine, "redis ガイド") == ["m4"]
    finally:
        await engine.close()


async def test_reconciliation_indexes_the_shadow_tokens_on_either_backend(backend):
    async with engine_at(backend, reconcile_batch_rows=2) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "开会 x 会议"), ("user", "明天开会议程"), ("user", "plain words"),
                                             ("user", "Ｒｅｄｉｓ ｶﾞｲﾄﾞ")])), index=False)
        await engine.reconcile_pending()
        assert await _found(engine, "开会议") == ["m2"]
        assert await _found(engine, "会议") == ["m1", "m2"]
        assert await _found(engine, "redis ガイド") == ["m4"]


# -- substring semantics as a property ------------------------------------------------------------

HAN = "东京会议开部署失败東議"
KANA = "カタナガイドをの"
HANGUL = "한국어"
LATIN = ["redis", "meeting", "deploy", "x"]
PIECES = [*HAN, *KANA, *HANGUL, "ｶﾀﾅ", "ｶﾞｲﾄﾞ", "Ｒｅｄｉｓ", *LATIN, " ", " ", "・", "、", "-"]
# the oracle's own view of the alphabet: a CJK character, after NFKC
ORACLE_CJK = re.compile(f"[{HAN}{KANA}{HANGUL}]+")


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def oracle(text: str, query: str) -> bool:
    """Whether a message matches, by Python's `in`: every CJK run of every query word is a substring
    of the text, every other part of it one of the text's Latin words (case folded)."""
    folded = _nfkc(text).lower()
    words = set(re.findall("[a-z0-9]+", folded))
    for word in query.split():
        word = _nfkc(word).lower()
        for run in ORACLE_CJK.findall(word):
            if run not in folded:
                return False
        for latin in re.findall("[a-z0-9]+", word):
            if latin not in words:
                return False
    return True


texts = st.lists(st.sampled_from(PIECES), min_size=1, max_size=14).map("".join)


@st.composite
def queries(draw, corpus: list[str]) -> str:
    words = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["substring", "substring", "cjk", "latin", "glued"]))
        if kind == "substring":  # a piece of some message's text: likely to match
            source = _nfkc(draw(st.sampled_from(corpus)))
            runs = ORACLE_CJK.findall(source) or ["东"]
            run = draw(st.sampled_from(runs))
            start = draw(st.integers(0, len(run) - 1))
            words.append(run[start:start + draw(st.integers(1, 4))])
        elif kind == "cjk":
            words.append("".join(draw(st.lists(st.sampled_from(HAN + KANA + HANGUL), min_size=1, max_size=3))))
        elif kind == "latin":
            words.append(draw(st.sampled_from([*LATIN, "REDIS", "Ｍｅｅｔｉｎｇ"])))
        else:
            words.append(draw(st.sampled_from(["东京", "ｶﾀﾅ", "会议"])) + draw(st.sampled_from(LATIN)))
    return " ".join(words)


def test_cjk_search_finds_exactly_what_python_in_finds(backend):
    loop = asyncio.new_event_loop()
    engine = Engine(backend.data_dir, settings=backend.settings())
    loop.run_until_complete(engine.open())
    keys = itertools.count()

    @settings(max_examples=120 if backend.kind == "sqlite" else 50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data(), corpus=st.lists(texts, min_size=1, max_size=10))
    def check(data, corpus):
        key = f"agent:main:p{next(keys)}"
        loop.run_until_complete(engine.append(AppendParams(sessionKey=key, events=chain("m", [("user", t) for t in corpus]))))
        for _ in range(4):
            query = data.draw(queries(corpus))
            result = loop.run_until_complete(engine.search(SearchParams(query=query, sessionKeys=[key], limit=25)))
            expected = {f"m{i}" for i, text in enumerate(corpus, 1) if oracle(text, query)}
            assert set(ids(result)) == expected, (query, corpus, [index_text(t) for t in corpus])

    try:
        check()
    finally:
        loop.run_until_complete(engine.close())
        loop.close()


# -- the upgrade from a store whose index rows hold plain text ------------------------------------

def _to_schema_8(db) -> None:
    """Rewrite a store as schema version 8 wrote it: index rows hold the text as it stands, and
    migrations 9-14 are not recorded (what 10-14 made is dropped too)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT f.rowid, e.text, f.ts, f.mid FROM msg_fts f JOIN events e ON e.id = f.rowid "
                            "ORDER BY f.rowid").fetchall()
        conn.execute("DELETE FROM msg_fts")
        conn.executemany("INSERT INTO msg_fts (rowid, text, ts, mid) VALUES (?, ?, ?, ?)", rows)
        undo_meaning_index(conn)  # migration 15's
        conn.execute("DELETE FROM schema_migrations WHERE version >= 9")
        conn.execute("DROP INDEX windows_by_span")  # migration 14's
        conn.execute("ALTER TABLE windows DROP COLUMN ts_min")
        conn.execute("DROP INDEX windows_by_ts_max")
        conn.execute("ALTER TABLE windows DROP COLUMN ts_max")
        conn.execute("DROP TABLE prefix_words")
        conn.execute("DROP TABLE prefix_postings")
        conn.execute("DROP TABLE index_gone")  # migration 12's
        conn.execute("DROP INDEX events_all_by_ts")  # 13 replaced 8's index
        conn.execute("CREATE INDEX events_by_ts ON events (ts) WHERE text IS NOT NULL")


async def _old_store(data_dir) -> None:
    async with engine_at(data_dir) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:latin", events=chain("l", [("user", "deploy the api"), ("user", "api down")])))
        await engine.append(AppendParams(sessionKey="agent:main:cjk", events=chain("c", [("user", "明天开会议程"), ("user", "deploy 部署失败")])))
    _to_schema_8(data_dir / "agents" / "main.db")
    with sqlite3.connect(data_dir / "agents" / "main.db") as conn:  # the old layout: a whole run is one word
        assert conn.execute("SELECT rowid FROM msg_fts WHERE msg_fts MATCH '\"明天开会议程\"'").fetchall()


async def test_an_upgraded_store_hands_its_cjk_windows_to_reconciliation(tmp_path):
    await _old_store(tmp_path)
    async with engine_at(tmp_path) as engine:
        store = await engine.store("main")
        latest = MIGRATIONS[-1][0]  # every migration past the old layout's 8, whatever came later
        assert [v for v, _ in await store.applied_migrations()][8 - latest:] == list(range(9, latest + 1))
        first = await engine.search(SearchParams(query="deploy"))
        assert first["indexing"] is True and ids(first) == ["l1"]  # the Latin-only window stays searchable
        assert (await engine.search(SearchParams(query="开会")))["results"] == []
        await engine.reconcile_pending()
        assert await _found(engine, "开会") == ["c1"]
        second = await engine.search(SearchParams(query="deploy"))
        assert "indexing" not in second and sorted(ids(second)) == ["c2", "l1"]
        assert await _found(engine, "deploy 失败") == ["c2"]


def test_the_serve_process_upgrades_a_store_and_its_worker_rebuilds_the_cjk_windows(tmp_path):
    data = tmp_path / "data"
    asyncio.run(_old_store(data))
    server = Server(data, tmp_path / "server.log")
    try:
        # the search (or the worker's startup sweep, whichever comes first) has the window rebuilt
        status, first = server.post("sessions.search", {"query": "部署"})
        assert status == 200 and (first.get("indexing") is True and first["results"] == [] or ids(first) == ["c2"])
        wait_until(lambda: not server.post("index.status")[1]["agents"][0]["backlog"], 60, "the window to be rebuilt")
        status, after = server.post("sessions.search", {"query": "部署"})
        assert status == 200 and "indexing" not in after and ids(after) == ["c2"]
        assert ids(server.post("sessions.search", {"query": "议程"})[1]) == ["c1"]
    finally:
        server.stop()
