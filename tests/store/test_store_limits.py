"""What SQLite takes, PostgreSQL takes the same way (SPEC §2): NUL in message text is stored and
found on both; a NUL in a key, an id or a label is refused on both with a 400 naming the field; a
token past PostgreSQL's lexeme limit is still found whole and by a prefix."""

from __future__ import annotations

import psycopg
import pytest

from sessionsearch.errors import InvalidRequest
from sessionsearch.protocol import AppendParams, HistoryParams, SearchParams, UpsertParams

from ..helpers import chain, engine_at, ids, msg, undo_pg_meaning_index

KEY = "agent:main:limits"


async def test_text_with_a_nul_is_stored_found_and_shown_the_same_on_both_stores(backend):
    async with engine_at(backend) as engine:
        text = "alpha\x00beta gamma \uffff\ufffe delta \x00"
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", text), ("user", "beta alone")])))
        found = await engine.search(SearchParams(query="alpha\x00beta"))
        assert ids(found) == ["m1"] and found["results"][0]["snippet"] == text.strip()
        assert sorted(ids(await engine.search(SearchParams(query="beta")))) == ["m1", "m2"]
        assert ids(await engine.search(SearchParams(query="delta", match="prefix"))) == ["m1"]
        sessions = await engine.search(SearchParams(query="gamma", resultMode="sessions"))
        assert [s["best"]["snippet"] for s in sessions["results"]] == [text.strip()]
        history = await engine.history(HistoryParams(sessionKey=KEY))
        assert history["messages"][0]["content"] == text


async def test_a_reconciled_text_with_a_nul_is_found_the_same(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=[msg("m1", "user", "alpha\x00beta", None)]), index=False)
        await engine.reconcile_pending()
        found = await engine.search(SearchParams(query="beta", resultMode="sessions"))
        assert [s["best"]["snippet"] for s in found["results"]] == ["alpha\x00beta"]


@pytest.mark.parametrize(("call", "field"), [
    (lambda e: e.append(AppendParams(sessionKey="agent:main:k\x00y", events=chain("m", [("user", "x")]))), "sessionKey"),
    (lambda e: e.append(AppendParams(sessionKey=KEY, events=[msg("i\x00d", "user", "x", None)])), "events[0].id"),
    (lambda e: e.append(AppendParams(sessionKey=KEY, events=[msg("m1", "user", "x", "p\x00")])), "events[0].parentId"),
    (lambda e: e.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "x")]), sessionId="s\x00")), "sessionId"),
    (lambda e: e.upsert_session(UpsertParams(sessionKey=KEY, label="la\x00bel")), "label"),
    (lambda e: e.upsert_session(UpsertParams(sessionKey=KEY, displayName="\x00")), "displayName"),
    (lambda e: e.upsert_session(UpsertParams(sessionKey=KEY, spawnedBy="agent:main:\x00")), "spawnedBy"),
    (lambda e: e.append(AppendParams(sessionKey=KEY, events=[{"type": "message", "id": "r1", "parentId": None,
                               "message": {"role": "bash\x00Execution", "content": "x"}}])), "events[0].message.role"),
])
async def test_a_nul_in_a_key_an_id_or_a_label_is_refused_naming_the_field_and_nothing_is_lost(backend, call, field):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("ok", [("user", "kept words")])))
        with pytest.raises(InvalidRequest) as caught:
            await call(engine)
        assert caught.value.field == field and "NUL" in caught.value.message
        assert ids(await engine.search(SearchParams(query="kept"))) == ["ok1"]
        await engine.append(AppendParams(sessionKey=KEY, events=[msg("ok2", "user", "kept after", "ok1")]))  # the store goes on
        assert sorted(ids(await engine.search(SearchParams(query="kept")))) == ["ok1", "ok2"]


async def test_a_nul_in_a_carried_roles_body_is_stored_and_read_back_on_both_stores(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=[{"type": "message", "id": "b1", "parentId": None,
                                   "message": {"role": "bashExecution", "content": "a\x00b"}},
                                  msg("b2", "user", "after the tool", "b1")]))
        history = await engine.history(HistoryParams(sessionKey=KEY))
        assert [m["content"] for m in history["messages"]] == ["a\x00b", "after the tool"]
        assert ids(await engine.search(SearchParams(query="after"))) == ["b2"]


async def test_a_token_past_postgresqls_lexeme_limit_is_found_whole_and_by_a_prefix(backend):
    long = "ж" * 1500  # 3,000 bytes of UTF-8: past the 2,047 a lexeme holds
    other = "ж" * 1499 + "z"
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", f"{long} tail"), ("user", other), ("user", "ж" * 20)])))
        assert ids(await engine.search(SearchParams(query=long))) == ["m1"]
        assert ids(await engine.search(SearchParams(query=long[:1400]))) == []
        assert sorted(ids(await engine.search(SearchParams(query="жжж", match="prefix")))) == ["m1", "m2", "m3"]
        assert sorted(ids(await engine.search(SearchParams(query="ж" * 900, match="prefix")))) == ["m1", "m2"]
        assert ids(await engine.search(SearchParams(query=f"{long[:900]} tail", match="prefix"))) == []  # prefix: last word only
        assert ids(await engine.search(SearchParams(query=f"tail {long[:900]}", match="prefix"))) == ["m1"]
        assert sorted(ids(await engine.search(SearchParams(query="ж" * 1000, match="prefix")))) == ["m1", "m2"]  # 2,000 bytes


async def test_bengali_and_marathi_words_are_found_as_sqlite_splits_them(backend):
    """unicode61 splits at the vowel signs and viramas of Indic scripts (Mn, Mc in Unicode 6.1):
    a word is then the phrase of its consonant runs, on both stores."""
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "আমি বাংলা ভাষায় কথা বলি"), ("user", "मी मराठी बोलतो"),
                                             ("user", "ব ল"), ("user", "मर")])))
        assert sorted(ids(await engine.search(SearchParams(query="বাংলা")))) == ["m1", "m3"]  # the phrase ব ল, as m3 has it
        assert ids(await engine.search(SearchParams(query="ভাষায়"))) == ["m1"]
        assert ids(await engine.search(SearchParams(query="मराठी"))) == ["m2"]
        assert sorted(ids(await engine.search(SearchParams(query="मर")))) == ["m2", "m4"]
        assert sorted(ids(await engine.search(SearchParams(query="ব")))) == ["m1", "m3"]


async def test_an_upgraded_postgresql_store_indexes_its_non_ascii_rows_again_by_unicode61(pg):
    """Rows indexed by the tokenizer before unicode61 (Indic words whole) are dropped by migration
    11 and their windows reconciled: the same words are then found as SQLite finds them."""
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:hi", events=chain("h", [("user", "हिन्दी भाषा")])))
        await engine.append(AppendParams(sessionKey="agent:main:en", events=chain("e", [("user", "plain words")])))
    with psycopg.connect(pg.database_url, autocommit=True) as conn:  # as the earlier tokenizer left it
        conn.execute("UPDATE ss_index i SET tsv = 'हिन्दी:1 भाषा:2'::tsvector, tf = '{\"हिन्दी\": 1, \"भाषा\": 1}', "
                     "dl = 2 FROM ss_events e WHERE e.id = i.id AND e.event_id = 'h1'")
        conn.execute("UPDATE ss_windows w SET idx_tokens = 2 FROM ss_events e "
                     "WHERE e.wid = w.wid AND e.event_id = 'h1'")
        undo_pg_meaning_index(conn)  # migration 12's, which comes after
        conn.execute("DELETE FROM ss_schema_migrations WHERE version = 11")
    async with engine_at(pg) as engine:
        first = await engine.search(SearchParams(query="हिन्दी"))
        assert first["results"] == [] and first["indexing"] is True
        assert ids(await engine.search(SearchParams(query="plain"))) == ["e1"]
        await engine.reconcile_pending()
        done = await engine.search(SearchParams(query="हिन्दी"))
        assert ids(done) == ["h1"] and "indexing" not in done
    with psycopg.connect(pg.database_url) as conn:
        rows, tokens = conn.execute("SELECT sum(idx_rows), sum(idx_tokens) FROM ss_windows").fetchone()
        assert (rows, tokens) == conn.execute("SELECT count(*), sum(dl) FROM ss_index").fetchone() == (2, 7)
