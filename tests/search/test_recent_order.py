"""`order: "recent"` against a brute-force ranking: every match sorted by (newest, message id),
scored by FTS5's own bm25, over windows written at once, out of order and long after they began."""

from __future__ import annotations

import random
import sqlite3

from sessionsearch.protocol import AppendParams, SearchParams, SessionRef
from sessionsearch.store.base import Match
from sessionsearch.store.sqlite.recent import RecentScores, _Counter, phrases

from ..helpers import BASE_TS, engine_at, timed

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "zeta"]  # alpha the most frequent, zeta the rarest
WEIGHTS = [40, 20, 10, 4, 2, 1]


def _texts(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choices(WORDS, WEIGHTS, k=rng.randint(1, 9))) for _ in range(n)]


async def _corpus(engine, rng: random.Random) -> None:
    """An old window written over most of the time span, windows one after another, one with its
    timestamps shuffled, and ties on the timestamp."""
    span = 100_000
    old = [("user", t, BASE_TS + rng.randrange(span * 4 // 5)) for t in _texts(rng, 150)]
    old.sort(key=lambda r: r[2])
    await engine.append(AppendParams(sessionKey="agent:main:old", events=timed("o", old[:100]), sessionId="w-old"))
    for n in range(8):
        lo = BASE_TS + n * span // 8
        items = [("assistant" if i % 2 else "user", t, lo + i * 50) for i, t in enumerate(_texts(rng, 60))]
        if n == 3:
            rng.shuffle(items)
        if n == 5:
            items = [(r, t, lo) for r, t, _ in items]  # every timestamp the same
        await engine.append(AppendParams(sessionKey=f"agent:main:s{n}", events=timed(f"s{n}-", items), sessionId=f"w{n}"))
    await engine.append(AppendParams(sessionKey="agent:main:old", events=timed("o", old)[100:], sessionId="w-old"))  # the old window, later


def _brute(db, query: str, role: str | None = None, keys: list[str] | None = None) -> list[tuple[str, float]]:
    """(message id, score) of the 25 newest matches: every match read, sorted here, bm25 by FTS5."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT f.mid, f.ts, bm25(msg_fts), e.role, w.session_key FROM msg_fts f "
            "JOIN events e ON e.id = f.rowid JOIN windows w ON w.wid = e.wid WHERE msg_fts MATCH ?",
            (query,)).fetchall()
    rows = [r for r in rows if (role is None or r[3] == role) and (keys is None or r[4] in keys)]
    rows.sort(key=lambda r: (-r[1], r[0]))
    return [(r[0], round(-r[2], 6)) for r in rows[:25]]


def _got(result: dict) -> list[tuple[str, float]]:
    return [(h["messageId"], h["score"]) for h in result["results"]]


async def test_recent_equals_every_match_sorted_for_each_word_and_scope(tmp_path):
    rng = random.Random(13)
    db = tmp_path / "agents" / "main.db"
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, rng)
        for word in WORDS:
            assert _got(await engine.search(SearchParams(query=word, order="recent", limit=25))) == _brute(db, f'"{word}"'), word
            got = await engine.search(SearchParams(query=word, order="recent", limit=25, role="assistant"))
            assert _got(got) == _brute(db, f'"{word}"', role="assistant"), word
            keys = ["agent:main:old", "agent:main:s3"]
            got = await engine.search(SearchParams(query=word, order="recent", limit=25, sessionKeys=keys))
            assert _got(got) == _brute(db, f'"{word}"', keys=keys), word
        assert _got(await engine.search(SearchParams(query="alpha zeta", order="recent", limit=25))) == \
            _brute(db, '"alpha" AND "zeta"')
        assert _got(await engine.search(SearchParams(query="alpha ze", order="recent", match="prefix", limit=25))) == \
            _brute(db, '"alpha" AND "ze" *')
        # the scores came from the counts kept, not from FTS5's bm25 (which would equal them too)
        assert set((await engine.store("main"))._recent_scores._counts) >= {f'"{w}"' for w in WORDS} | {'"ze" *'}


async def test_recent_scores_follow_the_index_as_it_changes(tmp_path):
    """The document counts behind the scores are cached per state of the index: a write that
    changes a word's count changes its scores at once."""
    rng = random.Random(7)
    db = tmp_path / "agents" / "main.db"
    async with engine_at(tmp_path) as engine:
        await _corpus(engine, rng)
        before = _got(await engine.search(SearchParams(query="delta", order="recent", limit=25)))
        assert before == _brute(db, '"delta"')
        await engine.append(AppendParams(sessionKey="agent:main:new", events=timed("n", [("user", "delta delta", BASE_TS + 10**6)] * 1
                                                      + [("user", f"delta {w}", BASE_TS + 10**6 + i)
                                                         for i, w in enumerate(WORDS * 20)]), sessionId="w-new"))
        after = _got(await engine.search(SearchParams(query="delta", order="recent", limit=25)))
        assert after == _brute(db, '"delta"')
        assert after[0][0].startswith("n") and dict(before).keys() != dict(after).keys()
        await engine.delete(SessionRef(sessionKey="agent:main:new"))
        assert _got(await engine.search(SearchParams(query="delta", order="recent", limit=25))) == before


async def test_recent_scores_equal_fts5_for_text_in_any_script(tmp_path):
    """Rows shown newest first are scored from their text as the index holds it: ASCII text counted
    in Python, the rest (diacritics, full-width letters, CJK shadows) by the scratch table; every
    score equals FTS5's bm25, prefixes and words glued to punctuation included."""
    rng = random.Random(5)
    forms = ["alpha", "Alpha", "ALPHA", "álpha", "ａｌｐｈａ", "alpha_beta", "alpha-beta", "alphabet", "東京alpha",
             "alpha東京", "会議 alpha", "beta", "gamma", "naïve", "x1alpha", "alpha2", "ｶﾀｶﾅ", "über"]
    rows = [("user", " ".join(rng.choices(forms, k=rng.randint(1, 12))), BASE_TS + i) for i in range(300)]
    db = tmp_path / "agents" / "main.db"
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:mixed", events=timed("m", rows), sessionId="w-mixed"))
        scorer = (await engine.store("main"))._recent_scores
        answers = []

        async def scores(*args):
            answers.append(await RecentScores.scores(scorer, *args))
            return answers[-1]

        scorer.scores = scores
        for query in ("alpha", "beta", "alpha beta", "gamma"):
            got = await engine.search(SearchParams(query=query, order="recent", limit=25))
            assert _got(got) == _brute(db, " AND ".join(f'"{w}"' for w in query.split())), query
        for query, expr in (("alph", '"alph" *'), ("beta alp", '"beta" AND "alp" *'), ("x1", '"x1" *')):
            got = await engine.search(SearchParams(query=query, order="recent", match="prefix", limit=25))
            assert _got(got) == _brute(db, expr), query
        assert len(answers) == 7 and None not in answers  # scored here, not by FTS5


async def test_a_newest_match_below_hundreds_of_older_messages_is_found(tmp_path):
    """The walk below the newest matches' rows is skipped only when it would cross few messages,
    all older: here the newest match lies under 300 older messages' worth of the same window."""
    items = [("user", "filler", BASE_TS + i) for i in range(300)]
    items.append(("user", "needle first", BASE_TS + 10**6))  # the newest of all, far down the window
    items += [("user", "needle", BASE_TS + 1000 + i) for i in range(99)]
    db = tmp_path / "agents" / "main.db"
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:long", events=timed("m", items), sessionId="w-long"))
        got = _got(await engine.search(SearchParams(query="needle", order="recent", limit=25)))
        assert got == _brute(db, '"needle"') and got[0][0] == "m301"


def test_only_plain_words_are_scored_outside_fts5():
    assert phrases(Match(("alpha", "beta"), prefix=True)) == ['"alpha"', '"beta" *']
    assert phrases(Match(("per-session",), prefix=False)) is None  # a phrase of two tokens: FTS5 scores it


async def test_a_restored_session_is_found_newest_first(tmp_path):
    """ts_max comes back with a restored window's rows, even for one archived before there was one."""
    db = tmp_path / "agents" / "main.db"
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:late", events=timed("l", [("user", "alpha late", BASE_TS + 10**6)] * 1)))
        await engine.archive(SessionRef(sessionKey="agent:main:late"))
        for n in range(3):  # newer windows, many matches: the bound stops above the restored one
            await engine.append(AppendParams(sessionKey=f"agent:main:s{n}", events=timed(f"s{n}-", [("user", "alpha", BASE_TS + n * 1000 + i)
                                                                   for i in range(100)])))
        store = await engine.store("main")
        await store.execute_write("UPDATE windows SET ts_max = NULL WHERE session_key = 'agent:main:late'")
        await engine.restore(SessionRef(sessionKey="agent:main:late"))
        await engine.reconcile_pending()
        got = _got(await engine.search(SearchParams(query="alpha", order="recent", limit=25)))
        assert got[0][0] == "l1" and got == _brute(db, '"alpha"')


def test_phrase_instances_in_any_text_are_counted_as_fts5_counts_them():
    """_Counter's counts of ASCII words and prefixes in texts of every kind (accented, folded as
    unicode61 folds them or not at all, CJK shadows, white space of other scripts), with the
    chunks' tokens kept between calls, equal FTS5's own (highlight marks each instance once)."""
    schema = ("CREATE VIRTUAL TABLE msg_fts USING fts5 (text, ts UNINDEXED, mid UNINDEXED, "
              "tokenize = 'unicode61 remove_diacritics 2')")
    counter = _Counter.for_schema(schema)
    oracle = sqlite3.connect(":memory:")
    oracle.execute(schema.replace("msg_fts", "o"))
    pieces = ["cafe", "Café", "CAFÉ", "cafés", "café-bar", "straße", "strasse", "ﬁne", "fine", "naïve", "naive",
              "e\u0301te", "ete", "été", "東京 京都 東 京", "x\u3000cafe", "cafe\u00a0cafe", "CAFE.cafe", "über",
              "uber", "Über-cafe", "ete,ete", "ÉTÉ", "cafeé", "\u2019cafe\u2019", "ﾃｽﾄ"]
    rng = random.Random(20261203)
    for _round in range(40):
        texts = [(n, " ".join(rng.choices(pieces, k=rng.randint(1, 6)))) for n in range(1, 9)]
        oracle.execute("DELETE FROM o")
        oracle.executemany("INSERT INTO o (rowid, text) VALUES (?, ?)", texts)
        for parts in (['"cafe"'], ['"ete"', '"fine" *'], ['"naive"', '"uber"', '"strasse"'], ['"caf" *']):
            want = {n: [0.0] * len(parts) for n, _ in texts}
            for i, phrase in enumerate(parts):
                for n, marks in oracle.execute("SELECT rowid, length(highlight(o, 0, char(1), '')) - length(text) "
                                               "FROM o WHERE o MATCH ?", (phrase,)):
                    want[n][i] = float(marks)
            assert counter.frequencies(texts, parts) == want, (texts, parts)
    assert counter._chunks  # the non-ASCII chunks were kept: later rounds counted from them
