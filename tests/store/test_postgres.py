"""What only the PostgreSQL backend has to show: the tokens it indexes are SQLite's, BM25 equal to
FTS5's on the same data, recent-first and the kept counters, hostile words never tsquery syntax,
and the database going away and coming back (several processes writing at once:
test_postgres_writers.py). The shared behaviour tests run on it through the `backend` fixture."""

from __future__ import annotations

import math
import random
import sqlite3
import time
from collections import Counter
from decimal import Decimal

import psycopg
import pytest

from sessionsearch import Engine, Settings
from sessionsearch.errors import SearchTimeout, Unavailable
from sessionsearch.protocol import AppendParams, HistoryParams, SearchParams, SessionRef
from sessionsearch.store.base import Match
from sessionsearch.store.postgres import query as query_module
from sessionsearch.store.postgres.lexemes import _index_fields_limited, index_fields, index_tokens
from sessionsearch.store.postgres.query import DfCache, Query
from sessionsearch.store.postgres.recent import walk_sql, walk_windows
from sessionsearch.store.postgres.search_many import array_literal
from sessionsearch.store.rowids import LOW_SEQS
from sessionsearch.text.cjk import index_text
from sessionsearch.text.unicode61 import tokens as text_tokens

from ..fts5 import fts5_tokens
from ..helpers import BASE_TS, chain, engine_at, ids, leaf, msg, timed, until
from ..pg_proxy import PgProxy
from ..server import Server
from ..services import pg_url

KEY = "agent:main:pg"
TEXTS = ["Café CAFÉ cafe naïve Ærøskøbing straße ß", "per-session communication, it's 3.14 v2_beta foo_bar",
         "日本語のテキスト and 中文 mixed", "हिन्दी भाषा और देवनागरी", "emoji 😀 text 𝐁𝐨𝐥𝐝 ＦＵＬＬ ① Ⅻ ²",
         "quotes ' \" \\\\ back\\slash & | ! ( ) : * <-> ''", "Ελληνικά ΣΊΣΥΦΟΣ σίσυφος", "İstanbul ǅ ﬁ ﬀ",
         "明天去东京meeting吧、한국어 ｶﾞｲﾄﾞ Ｒｅｄｉｓ"]


def test_cjk_index_tokens_are_exactly_sqlites_unicode61_tokens():
    """On CJK, full-width and half-width text the lexemes are what SQLite's FTS5 indexes of the
    same index form (read back from fts5vocab): voiced kana, Hangul syllables and ideographs as
    they stand, full-width Latin folded, so both backends match the same messages."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(t, tokenize = 'unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, instance)")
    rng = random.Random(13)
    alphabet = [chr(c) for c in [*range(0x3041, 0x3097), *range(0x30A1, 0x30FB), 0x30FC, 0x3005, 0x3001, 0x3002, 0x30FB,
                                 *range(0xFF66, 0xFFA0), *range(0xFF21, 0xFF3B), 0xFF10, 0x3000, 0xAC00, 0xD55C, 0xAD6D,
                                 0x1100, 0x1161, 0x4E1C, 0x4EAC, 0x6771, 0xF900, 0xFA0E, 0x20000]] + [*"aZé -_.'"]
    for n in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20)))
        conn.execute("INSERT INTO f (rowid, t) VALUES (?, ?)", (n, index_text(text)))
        want = [term for term, in conn.execute("SELECT term FROM v WHERE doc = ? ORDER BY offset", (n,))]
        assert index_tokens(text) == want == text_tokens(index_text(text)), text


async def test_postgresql_indexes_exactly_the_tokens_sqlite_would(pg):
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", t) for t in TEXTS])))
        with psycopg.connect(pg.database_url) as conn:
            rows = conn.execute("SELECT i.dl, i.tf, array(SELECT lexeme FROM unnest(i.tsv) ORDER BY 1), e.text "
                                "FROM ss_index i JOIN ss_events e ON e.id = i.id ORDER BY i.id").fetchall()
    assert len(rows) == len(TEXTS)
    for (dl, tf, lexemes, text), fts5 in zip(rows, fts5_tokens([index_text(r[3]) for r in rows]), strict=True):
        want = Counter(fts5)  # CJK runs as their shadow tokens (text/cjk.py)
        assert (dl, tf, sorted(lexemes)) == (sum(want.values()), dict(want), sorted(want)), text


def test_the_fast_index_fields_store_what_merging_positions_in_python_stores(pg):
    """index_fields leaves merging a lexeme's positions to tsvector input: on every kind of text,
    and past each limit (16,383 positions, 256 of one lexeme, long tokens), PostgreSQL stores the
    same tsvector, tf and dl as merging them in Python does; ASCII is split as text.py splits it."""
    rng = random.Random(11)
    ascii_chars = [chr(c) for c in range(0x20, 0x7F)]
    texts = [*TEXTS, "".join(ascii_chars), "a " * 300 + "b", "x" * 3000 + " y", "Ünïcödé " + "ø" * 600,
             " ".join(str(i % 50) for i in range(17_000)), ""]
    texts += ["".join(rng.choice(ascii_chars) for _ in range(rng.randint(0, 80))) for _ in range(2000)]
    texts += [rng.choice(TEXTS) + " " + "".join(rng.choice(ascii_chars) for _ in range(20)) for _ in range(200)]
    for text in texts:
        if text.isascii():
            assert index_tokens(text) == text_tokens(text), text
    fast = [index_fields(t) for t in texts]
    slow = [_index_fields_limited(index_tokens(t)) for t in texts]
    assert [f[:2] for f in fast] == [s[:2] for s in slow]
    with psycopg.connect(pg.database_url) as conn:
        differ = conn.execute("SELECT count(*) FROM unnest(%s::text[], %s::text[]) AS u(a, b) "
                              "WHERE a::tsvector <> b::tsvector", ([f[2] for f in fast], [s[2] for s in slow]))
        assert differ.fetchone()[0] == 0


def _corpus(rng: random.Random) -> list[tuple[str, list[dict]]]:
    vocab = ["alpha", "beta", "gamma", "délta", "Delta", "epsilon", "per-session", "it's", "al", "alps", "zeta"]
    weights = [30, 20, 12, 8, 6, 5, 4, 4, 3, 3, 1]
    out = []
    for s in range(8):
        items = [(rng.choice(["user", "assistant"]), " ".join(rng.choices(vocab, weights, k=rng.randint(1, 14))),
                  BASE_TS + rng.randrange(10_000_000)) for _ in range(rng.randint(5, 60))]
        out.append((f"agent:main:s{s}", timed(f"s{s}-", items)))
    # CJK: runs glued, split by punctuation or spaces, mixed with Latin (BM25 over the shadow tokens)
    cjk = ["东京", "会议", "开会", "明天", "部署失败", "東京タワー", "ｶﾞｲﾄﾞ", "한국어", "alpha", "beta", "东京meeting"]
    for s in range(8, 11):
        items = [(rng.choice(["user", "assistant"]),
                  "".join(rng.choice(cjk) + rng.choice(["", "", " ", "、"]) for _ in range(rng.randint(1, 12))),
                  BASE_TS + rng.randrange(10_000_000)) for _ in range(rng.randint(10, 40))]
        out.append((f"agent:main:s{s}", timed(f"s{s}-", items)))
    return out


def walk_windows_for(engine, word: str) -> int:
    """Windows a `recent` search of `word` may walk, as the main agent's store plans it now."""
    q = Query(Match((word,)))
    q.stats_sql(0, engine._stores["main"]._dfs)
    return walk_windows(q, engine._stores["main"]._dfs, 4)


async def _top(engine, match: Match, order: str, k: int) -> list[tuple]:
    store = await engine.store("main")
    async with store.reader() as reader:
        _, _, hits = await store.search_top(reader, match, k=k, order=order, include=None, exclude=None, role=None)
    real = [h for h in hits if h[0]]
    key = (lambda h: (h[1], -h[3], h[2])) if order == "relevance" else (lambda h: (-h[3], h[2]))
    return [(h[0], h[1], h[2]) for h in sorted(real, key=key)[:k]]


async def test_bm25_scores_and_their_order_equal_sqlites_on_the_same_data(pg, tmp_path):
    rng = random.Random(20261130)
    corpus = _corpus(rng)
    async with engine_at(pg) as on_pg, engine_at(tmp_path / "sqlite") as on_sqlite:
        for engine in (on_pg, on_sqlite):
            for n, (key, events) in enumerate(corpus):
                await engine.append(AppendParams(sessionKey=key, events=events), index=n % 3 != 0)  # some imported, then reconciled
            await engine.append(AppendParams(sessionKey="agent:main:s1", events=[leaf("l1", "s1-5", "s1-2"), msg("x1", "user", "alpha rewound", "l1")]))
            await engine.reconcile_pending()
        queries = [Match(("alpha",)), Match(("zeta",)), Match(("DELTA",)), Match(("alpha", "beta")),
                   Match(("per-session",)), Match(("it's", "gamma")), Match(("al",), True), Match(("beta", "al"), True),
                   Match(("alpha", "per-ses"), True), Match(("nothing",)), Match(("东京",)), Match(("京",)),
                   Match(("京会议",)), Match(("会议开会",)), Match(("部署失败", "alpha")), Match(("ガイド",)),
                   Match(("东京meeting",)), Match(("東京タ", "al"), True), Match(("京al",), True), Match(("한국",)),
                   Match(("明天",), True)]
        compared = 0
        for match in queries:
            for order in ("relevance", "recent"):
                got, want = await _top(on_pg, match, order, 25), await _top(on_sqlite, match, order, 25)
                assert [(rid, mid) for rid, _, mid in got] == [(rid, mid) for rid, _, mid in want], (match, order)
                assert got or match.words == ("nothing",), match  # every other query compares hits
                for (_, a, _), (_, b, _) in zip(got, want):
                    assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), (match, order, a, b)
                compared += len(got)
        assert compared > 500  # the queries found what they were meant to compare


async def test_recent_walks_windows_newest_first_and_equals_sorting_every_match(pg):
    """`recent` reads the windows of highest ts_max first and stops (store/postgres/recent.py):
    with timestamps interleaved across windows, old windows appended to late and windows imported
    then reconciled, its hits are those of sorting every match, for words of every share, with and
    without the store's counts to plan the walk."""
    rng = random.Random(20261201)
    vocab, weights = ["often", "sometimes", "seldom", "once", "filler"], [30, 8, 2, 0.2, 60]
    texts: dict[str, tuple[str, int]] = {}  # message id -> (text, ts)

    async def append(key: str, events: list[dict], index: bool = True) -> None:
        await engine.append(AppendParams(sessionKey=key, events=events), index=index)
        texts.update((e["id"], (e["message"]["content"], e["message"]["timestamp"])) for e in events)

    async with engine_at(pg) as engine:
        for s in range(40):
            items = [(rng.choice(["user", "assistant"]), " ".join(rng.choices(vocab, weights, k=rng.randint(1, 6))),
                      BASE_TS + rng.randrange(1_000_000) + s * rng.choice([0, 20_000]))  # interleaved, drifting
                     for _ in range(rng.randint(5, 40))]
            await append(f"agent:main:s{s}", timed(f"s{s}-", items), index=s % 7 != 3)
        for s in rng.sample(range(40), 12):  # old windows get the newest rows
            late = ["often seldom", "often", "once"]
            await append(f"agent:main:s{s}", [msg(f"s{s}-late{i}", "user", rng.choice(late),
                                                  ts=BASE_TS + 2_000_000 + rng.randrange(1_000_000))
                                              for i in range(rng.randint(1, 3))])
        await engine.reconcile_pending()
        store = await engine.store("main")
        compared = 0
        for planned in (False, True):
            for word in ["often", "sometimes", "seldom", "once", "nothing"]:
                for k in (1, 3, 25):
                    store._dfs.__init__()  # no counts: the walk is planned blind
                    if planned:
                        await _top(engine, Match((word,)), "relevance", k)  # counts seen
                    got = [mid for _, _, mid in await _top(engine, Match((word,)), "recent", k)]
                    want = [mid for _, mid in sorted((-ts, mid) for mid, (text, ts) in texts.items()
                                                     if word in text.split())[:k]]
                    assert got == want, (word, k, planned)
                    compared += len(got)
        assert compared > 100


async def test_cached_document_counts_follow_every_change_of_the_index(pg):
    """A store reuses the df it counted while the index state it counted at holds (search.py):
    after each kind of write, the scores it ranks with equal those of a store counting afresh."""
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=timed("a", [("user", "alpha beta", BASE_TS),
                                                        ("user", "alpha", BASE_TS + 1)])))
        await engine.append(AppendParams(sessionKey="agent:main:b", events=timed("b", [("user", "beta gamma", BASE_TS + 2)])))
        # enough other rows that every word's idf is above FTS5's floor (a stale df changes scores)
        await engine.append(AppendParams(sessionKey="agent:main:d", events=timed("d", [("user", f"filler {i}", BASE_TS) for i in range(40)])))
        store = await engine.store("main")
        queries = [Match(("alpha",)), Match(("beta",)), Match(("alpha", "beta")), Match(("al",), True)]

        async def check(step: str) -> None:
            for match in queries:
                cached = await _top(engine, match, "relevance", 10)
                kept, store._dfs = store._dfs, DfCache()  # as another process would count
                fresh = await _top(engine, match, "relevance", 10)
                store._dfs = kept
                assert cached == fresh, (step, match)

        await check("first")
        await engine.append(AppendParams(sessionKey="agent:main:a", events=[msg("a3", "user", "alpha again", "a2", ts=BASE_TS + 3)]))
        await check("append to a window")
        await engine.append(AppendParams(sessionKey="agent:main:c", events=timed("c", [("user", "alpha beta alpha", BASE_TS + 4)])))
        await check("a new window")
        await engine.delete(SessionRef(sessionKey="agent:main:b"))
        await check("a deleted session")
        await engine.append(AppendParams(sessionKey="agent:main:a", events=[msg("a4", "user", "beta rewound", "a1", ts=BASE_TS + 5)]))
        await check("a side append")
        await engine.reconcile_pending()  # index rows change, the catalog does not
        await check("reconciled")
        await engine.archive(SessionRef(sessionKey="agent:main:c"))
        await check("archived")
        await engine.restore(SessionRef(sessionKey="agent:main:c"))
        await engine.reconcile_pending()
        await check("restored")


async def test_a_kept_document_count_is_used_only_while_its_index_state_holds(pg):
    """ss_search_stats (schema migration 9) answers each phrase's count the caller kept when the
    index state it was kept at is the head's, and counts it from the index otherwise: a count kept
    wrong on purpose comes back as kept with the state, and the true count with any other."""
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=timed("a", [("user", "alpha beta", BASE_TS),
                                                        ("user", "alpha", BASE_TS + 1),
                                                        ("user", "gamma", BASE_TS + 2)])))
        store = await engine.store("main")
        sql = ("SELECT dfs FROM ss_search_stats(%s, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, %s::text[], "
               "%s::bigint[], %s::bigint[], %s::bigint[], %s::numeric[], %s::bigint[])")
        qs = ["'alpha'", "'beta'", "'al':*"]
        with psycopg.connect(pg.database_url, autocommit=True) as conn:
            version, windows, gen, epoch = conn.execute(
                "SELECT version, windows, gen, epoch FROM ss_search_head(%s, NULL, NULL, NULL, NULL, NULL, NULL, "
                "NULL, NULL)", (store.ano,)).fetchone()
            held = [version] * 3, [windows] * 3, [gen] * 3, [epoch] * 3
            assert conn.execute(sql, (store.ano, qs, [7, 8, 9], *held)).fetchone()[0] == [7, 8, 9]
            assert conn.execute(sql, (store.ano, qs, [None] * 3, *[[None] * 3] * 4)).fetchone()[0] == [2, 1, 2]
            moved = [version, version + 1, version], [windows] * 3, [gen, gen, gen + 1], [epoch] * 3
            assert conn.execute(sql, (store.ano, qs, [7, 8, 9], *moved)).fetchone()[0] == [7, 1, 2]


async def test_a_words_frequency_is_read_once_a_row_for_its_score(pg):
    """A row's score reads each phrase's frequency once (Query.terms_sql): the statement of a
    two-word search holds each word's jsonb lookup once, and ranks as every path ranks."""
    q = Query(Match(("alpha", "beta")))
    q.stats_sql(1, DfCache())
    scored = f"SELECT {q.score_sql()} FROM st, {q.terms_sql('st, ss_index m')}"
    assert scored.count("m.tf ->>") == 2 and "m.dl" in scored and scored.count("m.dl") == 1


async def test_the_kept_head_follows_a_write_in_flight_when_it_was_read(pg, monkeypatch):
    """A store keeps the sums of its windows' counters and has each search check them rather than
    sum them again (schema migration 6): a write that had not committed when they were summed is
    seen once it has, as a store summing afresh sees it."""
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=timed("a", [("user", "alpha beta", BASE_TS),
                                                        ("user", "alpha", BASE_TS + 1)])))
        await engine.append(AppendParams(sessionKey="agent:main:d", events=timed("d", [("user", f"filler {i}", BASE_TS) for i in range(40)])))
        store = await engine.store("main")
        async with store.reader() as reader:
            (wid, _, _), = await store.windows_of(reader, "agent:main:a")
        match = Match(("alpha",))
        before = await _top(engine, match, "relevance", 10)
        with psycopg.connect(pg.database_url) as writer:  # in flight while the next search sums
            writer.execute("UPDATE ss_windows SET idx_rows = idx_rows + 30, idx_tokens = idx_tokens + 900 "
                           "WHERE wid = %s", (wid,))
            store._dfs = DfCache()
            assert await _top(engine, match, "relevance", 10) == before  # summed without it
            assert await _top(engine, match, "relevance", 10) == before  # checked, kept
            # a newer write commits while the older one holds the snapshots' xmin back: its window
            # is among those the kept head has checked (and past KEPT_RECENT of them it is not kept)
            await engine.append(AppendParams(sessionKey="agent:main:d", events=[msg("d41", "user", "alpha late", "d40", ts=BASE_TS + 2)]))
            between = await _top(engine, match, "relevance", 10)
            async with store.reader() as reader:
                (late, _, _), = await store.windows_of(reader, "agent:main:d")
            assert store._dfs.kept_head is not None
            assert any(w.startswith(f"{late}:") for w in store._dfs.kept_head[3])  # (others' xmin may add more)
            monkeypatch.setattr(query_module, "KEPT_RECENT", 0)
            assert await _top(engine, match, "relevance", 10) == between and store._dfs.kept_head is None
            monkeypatch.undo()
        kept = await _top(engine, match, "relevance", 10)  # committed now
        store._dfs = DfCache()
        assert kept == await _top(engine, match, "relevance", 10) != between != before


async def test_recent_walks_both_id_ranges_of_a_window_past_the_low_region(pg):
    """`recent` reads a window's high id range (recent.py) only when its seqs reach it: the newest
    rows of a window that long are there, and are the answer."""
    n = LOW_SEQS + 40
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:old", events=timed("o", [("user", "word filler", BASE_TS + i) for i in range(30)])))
        events = timed("m", [("user", "word filler", BASE_TS + 1000 + i) for i in range(n)])
        for start in range(0, n, 10_000):
            await engine.append(AppendParams(sessionKey=KEY, events=events[start:start + 10_000], sessionId="s-long"))
        await _top(engine, Match(("word",)), "relevance", 3)  # counts seen: the walk is planned from them
        assert walk_windows_for(engine, "word") > 0
        got = [mid for _, _, mid in await _top(engine, Match(("word",)), "recent", 3)]
        assert got == [f"m{i}" for i in (n, n - 1, n - 2)]


def test_a_statement_plans_the_walk_of_an_uncounted_word_as_its_cached_counts_would(pg):
    """recent.walk_sql, the walk length a statement works out from the counts it reads (a word
    this process has not counted), is walk_windows' from the same counts, one word or two."""
    cases = [(rows, windows, dfs) for rows, windows in ((0, 0), (1_000, 10), (200_000, 2_000), (1_000_000, 10_202))
             for dfs in ((0,), (12,), (3_000,), (10_000,), (100_000,), (1_000_000,), (10_000, 100_000), (3_000, 12))]
    with psycopg.connect(pg.database_url) as conn:
        for rows, windows, dfs in cases:
            q = Query(Match(tuple(f"w{i}" for i in range(len(dfs)))))
            cache = DfCache()
            q.stats_sql(0, cache)  # sets each phrase's tsquery parameter (q0, …), the cache's key
            cache.head = (rows, windows)
            for i, df in enumerate(dfs):
                cache.put(q.params[f"q{i}"], (0, 0, 0, 0), df)
            for k in (2, 11, 26):
                columns = ", ".join(f"{df}::bigint AS df{i}" for i, df in enumerate(dfs))
                got = conn.execute(f"WITH st AS (SELECT {rows}::bigint AS rows, {windows}::bigint AS windows, "
                                   f"{columns}) SELECT {walk_sql(q)}", {"k": k}).fetchone()[0]
                assert got == walk_windows(q, cache, k), (rows, windows, dfs, k)


HOSTILE = ["'", "''", "\\", "\\'", "a'b", "it's", "&", "|", "!", "(", ")", ":*", "<->", "a&b", "a|b", "!a", "(a)",
           "a:*", "a<->b", "'a' & 'b'", "x:A", "a:1", "\\x00", "%", "_", "a%b", "a_b", "--", "/*", ";", "$1", "%s",
           "%(k)s", "E'\\\\'", "naïve's"]


async def test_hostile_words_are_literal_text_never_tsquery_syntax(pg):
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "it's a b&c back\\slash naive a_b a%b k s"), ("user", "other")])))
        for word in HOSTILE:
            for prefix in (False, True):
                await engine.search(SearchParams(query=word, match="prefix" if prefix else "exact"))  # answers, never an error
        assert ids(await engine.search(SearchParams(query="it's"))) == ["m1"]
        assert ids(await engine.search(SearchParams(query="a%b"))) == ["m1"] and ids(await engine.search(SearchParams(query="a_b"))) == ["m1"]
        assert ids(await engine.search(SearchParams(query="%(k)s"))) == ["m1"]  # the words k and s, as SQLite finds them
        store = await engine.store("main")
        for word in HOSTILE:  # straight to the store too, past the query parser
            async with store.reader() as reader:
                await store.search_top(reader, Match((word, "back"), True), k=5, order="relevance", include=None,
                                       exclude=None, role=None)


def test_a_list_bound_as_an_array_literal_arrives_as_the_driver_would_send_it(pg):
    """search_many binds the agents' lists as array literals, one string each: every value comes back."""
    texts = ['["12:345", "6:7"]', 'a"b', "back\\slash", "{x,y}", "NULL", "", " spaced ", "it's", None]
    numbers = [1, None, -3, 2**62, Decimal("12345678901234567890")]
    with psycopg.connect(pg.database_url, autocommit=True) as conn:
        row = conn.execute("SELECT %s::text[], %s::numeric[], %s::bigint[]",
                           (array_literal(texts, text=True), array_literal(numbers), array_literal([5, 6]))).fetchone()
    assert row == (texts, numbers, [5, 6])


async def test_underscores_and_percents_in_keys_are_never_wildcards(pg):
    async with engine_at(pg) as engine:
        for key in ("agent:main:a_b", "agent:main:axb", "agent:main:a%b", "agent:main:aXYb"):
            await engine.append(AppendParams(sessionKey=key, events=chain(key[-3:], [("user", "shared word")])))
        for key in ("agent:main:a_b", "agent:main:a%b"):
            hits = (await engine.search(SearchParams(query="shared", sessionKeys=[key])))["results"]
            assert [h["sessionKey"] for h in hits] == [key]
            assert [m["messageId"] for m in (await engine.history(HistoryParams(sessionKey=key)))["messages"]] == [f"{key[-3:]}1"]


async def test_a_reader_past_its_deadline_stops_the_statement(pg):
    async with engine_at(pg) as engine:
        store = await engine.store("main", create=True)
        started = time.monotonic()
        with pytest.raises(SearchTimeout):
            async with store.reader(time.monotonic() + 0.2) as reader:
                await reader.one("SELECT pg_sleep(5)")
        assert time.monotonic() - started < 4
        async with store.reader() as reader:  # the pool's connection is usable again
            await store.ping(reader)


async def test_postgresql_going_away_answers_unavailable_and_the_pool_recovers_by_itself(pg):
    proxy = PgProxy()
    proxy.start()
    url = pg_url(pg.database_url.rpartition("/")[2]).replace(":5432/", f":{proxy.port}/")
    engine = await Engine(pg.data_dir, settings=Settings(database_url=url)).open()
    try:
        await engine.append(AppendParams(sessionKey=KEY, events=[msg("a1", "user", "before the outage")]))
        await engine.backend.check_ready()
        proxy.stop()
        with pytest.raises(Unavailable):
            await engine.append(AppendParams(sessionKey=KEY, events=[msg("a2", "user", "during the outage")]))
        with pytest.raises(Unavailable):
            await engine.backend.check_ready()
        with pytest.raises(Unavailable):
            await engine.search(SearchParams(query="outage"))
        proxy.start()  # the same port: as the server coming back

        async def ready() -> bool:
            try:
                await engine.backend.check_ready()
            except Unavailable:
                return False
            return True

        await until(ready, 30, "the database to answer again", every=0.1)
        await engine.append(AppendParams(sessionKey=KEY, events=[msg("a3", "user", "after the outage")]))
        assert sorted(ids(await engine.search(SearchParams(query="outage")))) == ["a1", "a3"]
    finally:
        await engine.close()
        proxy.stop()


def test_over_http_an_outage_is_503_unavailable_and_readyz_says_so_until_it_is_back(pg, tmp_path):
    proxy = PgProxy()
    proxy.start()
    url = pg.database_url.replace(":5432/", f":{proxy.port}/")
    server = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_DATABASE_URL=url)
    try:
        body = {"sessionKey": KEY, "events": [msg("a1", "user", "before the outage")]}
        assert server.post("transcript.append", body)[0] == 200
        proxy.stop()
        status, answer = server.post("transcript.append", {"sessionKey": KEY, "events": [msg("a2", "user", "lost")]})
        assert status == 503 and answer["error"]["code"] == "UNAVAILABLE", answer
        ready = server.ready_when(503)
        assert "PostgreSQL" in ready["reason"], ready
        proxy.start()
        server.ready_when(200, 30)
        assert server.post("transcript.append", {"sessionKey": KEY, "events": [msg("a3", "user", "after")]})[0] == 200
        status, found = server.post("sessions.search", {"query": "outage after", "match": "prefix"})
        assert status == 200 and [h["messageId"] for h in found["results"]] == []
        assert [h["messageId"] for h in server.post("sessions.search", {"query": "outage"})[1]["results"]] == ["a1"]
    finally:
        assert server.stop() == 0
        proxy.stop()
    log = (tmp_path / "server.log").read_text()
    assert "api.crashed" not in log, log[-3000:]
