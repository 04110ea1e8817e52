"""Appends, the active branch, resets, rotation, deletion and archive (SPEC §2, §3)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from sessionsearch import Forbidden, InvalidRequest, NotFound, Settings
from sessionsearch.protocol import AppendParams, HistoryParams, RotateParams, SearchParams, SessionRef, UpsertParams
from sessionsearch.store.postgres import writer as pg_writer
from sessionsearch.store.sqlite import checkpoint
from sessionsearch.store.sqlite import writer as sqlite_writer

from ..helpers import chain, engine_at, header, ids, leaf, msg, reset, sql_rows

KEY = "agent:main:main"


async def test_linear_appends_are_searchable_at_once(backend):
    async with engine_at(backend) as engine:
        result = await engine.append(AppendParams(sessionKey=KEY, events=[header("s1"), *chain("m", [("user", "hello loan"),
                                                                      ("assistant", "loan reply")])], sessionId="s1"))
        assert result == {"appended": 3, "indexed": 2, "needsReconcile": False, "sessionId": "s1", "duplicates": 0}
        found = await engine.search(SearchParams(query="loan"))
        assert sorted(ids(found)) == ["m1", "m2"] and "indexing" not in found
        status = (await engine.index_status())["agents"][0]
        assert status["backlog"] == 0 and status["completeness"] == 1.0 and status["messages"] == 2


async def test_tool_results_reasoning_tool_calls_and_images_are_never_indexed(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=[
            msg("t1", "toolResult", "secretword from a tool", None),
            msg("a1", "assistant", [{"type": "thinking", "thinking": "secretword reasoning"},
                                    {"type": "toolCall", "name": "secretword"},
                                    {"type": "image", "data": "secretword"},
                                    {"type": "output_text", "text": "visible answer"}], "t1"),
            msg("s1", "system", "secretword system", "a1"),
            msg("", "user", "secretword without id", "s1"),
        ]))
        assert ids(await engine.search(SearchParams(query="secretword"))) == []
        assert ids(await engine.search(SearchParams(query="visible answer"))) == ["a1"]


async def test_text_comes_from_content_then_text_then_blocks(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=[
            {"type": "message", "id": "x1", "parentId": None, "message": {"role": "user", "text": "  from text  "}},
            msg("x2", "user", [{"type": "input_text", "text": "first"}, {"type": "text", "text": "second"}], "x1"),
        ]))
        assert ids(await engine.search(SearchParams(query="from text"))) == ["x1"]
        assert ids(await engine.search(SearchParams(query="first second"))) == ["x2"]


async def test_every_role_the_runtime_writes_and_an_unknown_one_are_appended_and_only_user_and_assistant_indexed(
        backend):
    async with engine_at(backend) as engine:
        roles = ["user", "bashExecution", "custom", "branchSummary", "compactionSummary", "assistant", "robot"]
        events = chain("r", [(role, f"gannet {role}") for role in roles])
        events[1]["message"]["content"] = [{"no": "type"}]  # a role that is not indexed is carried as written
        assert (await engine.append(AppendParams(sessionKey=KEY, events=events)))["appended"] == len(roles)
        assert sorted(ids(await engine.search(SearchParams(query="gannet")))) == ["r1", "r6"]  # chain counts from 1
        history = await engine.history(HistoryParams(sessionKey=KEY, includeTools=True))
        assert [m["role"] for m in history["messages"]] == roles


async def test_an_invalid_event_rejects_the_whole_batch_naming_it(backend):
    async with engine_at(backend) as engine:
        bad = chain("m", [("user", "valid words"), ("user", "more")])
        bad[1]["message"]["role"] = ""
        with pytest.raises(InvalidRequest) as err:
            await engine.append(AppendParams(sessionKey=KEY, events=bad))
        assert err.value.field == "events[1].message.role" and "events[1].message.role" in err.value.message
        assert ids(await engine.search(SearchParams(query="valid"))) == []
        for event, field in [({"type": "nope"}, "events[0].type"), ("text", "events[0]"),
                             ({"type": "leaf", "id": "l"}, "events[0].targetId"),
                             ({"type": "message", "id": "a", "timestamp": "yesterday",
                               "message": {"role": "user", "content": "x"}}, "events[0].timestamp"),
                             ({"type": "message", "id": "a", "message": {"role": "user", "content": 5}},
                              "events[0].message.content")]:
            with pytest.raises(InvalidRequest) as err:
                await engine.append(AppendParams(sessionKey=KEY, events=[event]))
            assert err.value.field == field


async def test_a_hits_timestamp_is_the_events_never_the_messages_inner_one(backend):
    """The runtime stamps the message when it began and the event when it was written, seconds
    apart; the gateway's index takes the event's (SPEC §2), in either of its forms."""
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=[
            {"type": "message", "id": "e1", "parentId": None, "timestamp": "2026-01-02T03:04:05.250Z",
             "message": {"role": "user", "content": "stamp iso", "timestamp": 1767323041000}},
            {"type": "message", "id": "e2", "parentId": "e1", "timestamp": 1767323050000,
             "message": {"role": "assistant", "content": "stamp number", "timestamp": 1767323046999}}]))
        found = await engine.search(SearchParams(query="stamp", order="recent"))
        assert [(h["messageId"], h["timestamp"]) for h in found["results"]] == [
            ("e2", 1767323050000), ("e1", 1767323045250)]
        # since/until and history read the same time
        assert ids(await engine.search(SearchParams(query="stamp", since=1767323045250, until=1767323050000))) == ["e1"]
        history = await engine.history(HistoryParams(sessionKey=KEY))
        assert [m["timestamp"] for m in history["messages"]] == [1767323045250, 1767323050000]


async def test_an_event_without_a_timestamp_takes_the_time_it_was_stored_not_the_messages(backend):
    async with engine_at(backend) as engine:
        before = int(time.time() * 1000)
        await engine.append(AppendParams(sessionKey=KEY, events=[{"type": "message", "id": "e1", "parentId": None,
                                   "message": {"role": "user", "content": "stamp", "timestamp": 1767323041000}}]))
        stamp = (await engine.search(SearchParams(query="stamp")))["results"][0]["timestamp"]
        assert before <= stamp <= int(time.time() * 1000)


async def test_re_sent_events_are_not_stored_twice(backend):
    async with engine_at(backend) as engine:
        events = chain("m", [("user", "once only")])
        await engine.append(AppendParams(sessionKey=KEY, events=events))
        again = await engine.append(AppendParams(sessionKey=KEY, events=events))
        assert again["appended"] == 0 and again["duplicates"] == 1
        assert ids(await engine.search(SearchParams(query="once"))) == ["m1"]


async def test_rewound_branch_text_is_never_returned(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "keep this"), ("assistant", "abandoned idea"),
                                             ("user", "abandoned followup")])))
        result = await engine.append(AppendParams(sessionKey=KEY, events=[leaf("l1", "m3", "m1"), msg("n1", "assistant", "fresh path", "l1")]))
        assert result["needsReconcile"] is True
        during = await engine.search(SearchParams(query="abandoned"))
        assert during["results"] == [] and during["indexing"] is True
        await engine.reconcile_pending()
        assert (await engine.search(SearchParams(query="abandoned")))["results"] == []
        after = await engine.search(SearchParams(query="fresh path"))
        assert ids(after) == ["n1"] and "indexing" not in after
        assert ids(await engine.search(SearchParams(query="keep"))) == ["m1"]


async def test_a_leaf_control_with_an_unknown_target_changes_nothing(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "one"), ("user", "two")])))
        result = await engine.append(AppendParams(sessionKey=KEY, events=[leaf("l1", "m2", "ghost"), msg("m3", "user", "three", "l1")]))
        assert result["needsReconcile"] is False
        history = await engine.history(HistoryParams(sessionKey=KEY))
        assert [m["messageId"] for m in history["messages"]] == ["m1", "m2", "m3"]


async def test_a_side_append_does_not_move_the_leaf(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "main line")])))
        side = msg("x1", "assistant", "side note", "m1", appendMode="side")
        assert (await engine.append(AppendParams(sessionKey=KEY, events=[side])))["needsReconcile"] is True
        await engine.append(AppendParams(sessionKey=KEY, events=[msg("m2", "user", "continues main")]))
        await engine.reconcile_pending()
        history = await engine.history(HistoryParams(sessionKey=KEY))
        assert [m["messageId"] for m in history["messages"]] == ["m1", "m2"]
        assert ids(await engine.search(SearchParams(query="side note"))) == []


async def test_parentless_events_continue_from_the_current_leaf(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=[msg("a", "user", "first"), msg("b", "user", "second"), msg("c", "user", "third")]))
        assert (await engine.index_status())["agents"][0]["backlog"] == 0
        history = await engine.history(HistoryParams(sessionKey=KEY))
        assert [m["messageId"] for m in history["messages"]] == ["a", "b", "c"]


async def test_an_in_place_reset_keeps_the_session_indexed(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "before reset"), ("assistant", "old answer")])))
        result = await engine.append(AppendParams(sessionKey=KEY, events=[reset("r1", "m2", kept="m2"), msg("p1", "user", "after reset", "r1")]))
        assert result["needsReconcile"] is False
        assert sorted(ids(await engine.search(SearchParams(query="reset")))) == ["m1", "p1"]  # pre-reset text stays searchable


async def test_delete_removes_hits_and_leaves_no_flag(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "doomed words")])))
        await engine.append(AppendParams(sessionKey="agent:main:other", events=chain("o", [("user", "kept words")])))
        await engine.append(AppendParams(sessionKey=KEY, events=[leaf("l1", "m1", "m1"), msg("m9", "user", "doomed too", None)]))  # dirty
        assert (await engine.delete(SessionRef(sessionKey=KEY))) == {"sessionKey": KEY, "deleted": True}
        result = await engine.search(SearchParams(query="words"))
        assert ids(result) == ["o1"] and "indexing" not in result
        store = await engine.store("main")
        assert await sql_rows(store, "SELECT count(*) FROM msg_fts", "SELECT count(*) FROM ss_index") == [(1,)]
        assert await sql_rows(store, "SELECT count(*) FROM events", "SELECT count(*) FROM ss_events") == [(1,)]
        with pytest.raises(NotFound):
            await engine.delete(SessionRef(sessionKey=KEY))


async def test_a_rotated_keys_old_window_is_found_by_its_session_id(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "old window text")]), sessionId="s-old"))
        rotated = await engine.rotate(RotateParams(sessionKey=KEY, sessionId="s-new", reason="daily"))
        assert rotated == {"sessionKey": KEY, "sessionId": "s-new", "previousSessionId": "s-old"}
        await engine.append(AppendParams(sessionKey=KEY, events=chain("n", [("user", "new window text")])))
        hits = (await engine.search(SearchParams(query="window text")))["results"]
        assert {(h["sessionId"], h["messageId"]) for h in hits} == {("s-old", "m1"), ("s-new", "n1")}
        old = await engine.search(SearchParams(query="window", sessionId="s-old"))
        assert ids(old) == ["m1"]
        anchored = await engine.history(HistoryParams(sessionKey=KEY, sessionId="s-old", messageId="m1"))
        assert [m["messageId"] for m in anchored["messages"]] == ["m1"]
        tail = await engine.history(HistoryParams(sessionKey=KEY))
        assert tail["sessionId"] == "s-new" and [m["messageId"] for m in tail["messages"]] == ["n1"]


async def test_archived_transcripts_are_left_out_and_counted_until_restored(backend, tmp_path):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "cold storage text")])))
        await engine.append(AppendParams(sessionKey="agent:main:b", events=chain("b", [("user", "hot storage text")])))
        assert (await engine.archive(SessionRef(sessionKey=KEY)))["archivedWindows"] == 1
        result = await engine.search(SearchParams(query="storage"))
        assert ids(result) == ["b1"] and result["archivedTranscriptsExcluded"] == 1
        if backend.kind == "sqlite":  # a gzip file per window; PostgreSQL: a bytea row per window
            assert (tmp_path / "cold" / "main").is_dir() and list((tmp_path / "cold" / "main").iterdir())
        else:
            assert await sql_rows(await engine.store("main"), "", "SELECT count(*) FROM ss_cold") == [(1,)]
        history = await engine.history(HistoryParams(sessionKey=KEY))  # opening the session restores it
        assert [m["messageId"] for m in history["messages"]] == ["m1"]
        restored = await engine.search(SearchParams(query="storage"))
        assert restored.get("indexing") is True and "archivedTranscriptsExcluded" not in restored
        await engine.reconcile_pending()
        assert sorted(ids(await engine.search(SearchParams(query="storage")))) == ["b1", "m1"]


async def test_appending_to_an_archived_session_is_refused(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "text")])))
        await engine.archive(SessionRef(sessionKey=KEY))
        with pytest.raises(InvalidRequest, match="archived"):
            await engine.append(AppendParams(sessionKey=KEY, events=[msg("m2", "user", "more")]))
        await engine.restore(SessionRef(sessionKey=KEY))
        assert (await engine.append(AppendParams(sessionKey=KEY, events=[msg("m2", "user", "more")])))["appended"] == 1


async def test_an_archive_makes_its_cold_files_durable_before_the_rows_leave_the_database(tmp_path, monkeypatch):
    """SQLite's cold files: a crash right after the archive's commit finds every transcript in one;
    each file, and the directory holding their names, is fsync'd while the rows are still stored."""
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", [("user", f"kept {i}") for i in range(300)])))
        await engine.append(AppendParams(sessionKey="agent:main:a", events=[msg("b1", "user", "second window", None)], sessionId="s2"))
        db = tmp_path / "agents" / "main.db"
        synced: list[tuple[str, int]] = []
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            real_fsync(fd)
            with closing(sqlite3.connect(db)) as conn:  # what a crash at this instant would leave
                synced.append((os.readlink(f"/proc/self/fd/{fd}"), conn.execute("SELECT count(*) FROM events").fetchone()[0]))

        monkeypatch.setattr(os, "fsync", fsync)
        assert (await engine.archive(SessionRef(sessionKey="agent:main:a")))["archivedWindows"] == 2
        monkeypatch.undo()
        cold = tmp_path / "cold" / "main"
        files = sorted(p.name for p in cold.iterdir())
        assert len(files) == 2 and all(name.endswith(".jsonl.gz") for name in files)
        names = [Path(path).name for path, _ in synced]
        assert sorted(n.replace(".tmp", ".gz") for n in names if n.endswith(".tmp")) == files
        assert "main" in names  # the directory, after the renames
        assert all(rows == 301 for _, rows in synced), synced  # every fsync came before the delete
        assert (await engine.history(HistoryParams(sessionKey="agent:main:a", limit=5)))["totalMessages"] > 0  # read back


async def test_a_session_id_of_another_key_is_rejected(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "x")]), sessionId="s1"))
        with pytest.raises(InvalidRequest, match="another session key"):
            await engine.append(AppendParams(sessionKey="agent:main:other", events=chain("o", [("user", "y")]), sessionId="s1"))


async def test_migrations_are_recorded_and_the_database_uses_wal(tmp_path):  # SQLite only: SQLite's files, WAL and mmap
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "x")])))
        store = await engine.store("main")
        assert await store.applied_migrations() == [(1, "transcripts_and_index"), (2, "dirty_version"),
                                                    (3, "catalog_changes"), (4, "tombstone_horizon"), (5, "hot_words"),
                                                    (6, "dense_row_ids"), (7, "recent_by_ts"),
                                                    (8, "time_ranges"), (9, "cjk_shadow_tokens"),
                                                    (10, "window_ts_max"), (11, "prefix_postings"), (12, "index_gone"),
                                                    (13, "time_ranges_covering"), (14, "window_ts_min"),
                                                    (15, "meaning_index"), (16, "score_bounds"), (17, "bounds_log"),
                                                    (18, "packed_embeddings")]
    with sqlite3.connect(tmp_path / "agents" / "main.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    async with engine_at(tmp_path) as engine:  # reopening applies nothing twice
        assert [v for v, _ in await (await engine.store("main")).applied_migrations()] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]
        assert ids(await engine.search(SearchParams(query="x"))) == ["m1"]


async def test_checkpoints_beside_the_writer_keep_the_wal_bounded(tmp_path, monkeypatch):  # SQLite only: SQLite's files, WAL and mmap
    """The writer's own automatic checkpoint is off; the thread beside it copies the WAL back and
    the writer rewinds it when it outgrows the limit, under a stream of commits with no pause."""
    monkeypatch.setattr(checkpoint, "INLINE_PAGES", 100)  # 400 KiB instead of 32 MiB
    text = " ".join(f"word{i}" for i in range(60))
    async with engine_at(tmp_path) as engine:
        store = await engine.store("main", create=True)
        for batch in range(300):  # ~100 MB of WAL frames written in all
            await engine.append(AppendParams(sessionKey=KEY, events=chain(f"b{batch}-", [("user", f"{text} batch{batch}")] * 100,
                                           parent=f"b{batch - 1}-100" if batch else None)))
        wal = tmp_path / "agents" / "main.db-wal"
        assert wal.stat().st_size < 32 << 20  # without the writer's own step: the ~100 MB written
        with sqlite3.connect(tmp_path / "agents" / "main.db") as conn:
            assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000  # other connections: default
        found = await engine.search(SearchParams(query="batch299"))
        assert len(ids(found)) == 10 and found["truncated"] is True
        assert any(t.name.startswith("sessionsearch-checkpoint") for t in threading.enumerate())
        assert store.path.stat().st_size > 20 << 20  # the frames were copied into the database file
    assert not any(t.name.startswith("sessionsearch-checkpoint") for t in threading.enumerate())
    async with engine_at(tmp_path) as engine:
        assert (await engine.index_status())["agents"][0]["messages"] == 30_000


async def test_readers_map_the_database_as_configured(tmp_path):  # SQLite's readers only
    for mib, expected in ((8, 8 << 20), (0, 0)):
        async with engine_at(tmp_path / str(mib), reader_mmap_mb=mib) as engine:
            await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "mapped words")])))
            store = await engine.store("main")
            async with store.reader() as reader:
                assert (await reader.conn.execute_fetchall("PRAGMA mmap_size"))[0][0] == expected
            assert ids(await engine.search(SearchParams(query="mapped"))) == ["m1"]
    assert Settings.load(env={"SESSIONSEARCH_READER_MMAP_MB": "0"}).reader_mmap_mb == 0


async def test_a_reader_maps_the_database_while_nothing_is_written_and_stops_at_a_change(tmp_path):  # SQLite only: SQLite's files, WAL and mmap
    async def mapped(store) -> set[int]:
        return {(await r.conn.execute_fetchall("PRAGMA mmap_size"))[0][0] for r in store._all_readers}

    async with engine_at(tmp_path, reader_quiet_mmap_mb=16) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "mapped words")])))
        store = await engine.store("main")
        for _ in range(3):  # the first search has no earlier version to compare; then two quiet ones
            assert ids(await engine.search(SearchParams(query="mapped"))) == ["m1"]
        assert await mapped(store) == {0}
        assert ids(await engine.search(SearchParams(query="mapped"))) == ["m1"]  # the third quiet search in a row
        assert 16 << 20 in await mapped(store)
        assert ids(await engine.search(SearchParams(query="mapped", order="recent"))) == ["m1"]  # read through the mapping
        await engine.append(AppendParams(sessionKey=KEY, events=chain("n", [("assistant", "mapped again")], parent="m1")))
        assert sorted(ids(await engine.search(SearchParams(query="mapped")))) == ["m1", "n1"]  # sees the commit, unmaps
        assert await mapped(store) == {0}
    async with engine_at(tmp_path / "never", reader_quiet_mmap_mb=0) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "mapped words")])))
        for _ in range(6):
            await engine.search(SearchParams(query="mapped"))
        assert await mapped(await engine.store("main")) == {0}
    async with engine_at(tmp_path / "always", reader_mmap_mb=8, reader_quiet_mmap_mb=0) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "mapped words")])))
        for _ in range(6):  # mapped all along: quiet or not, never less than search.readerMmapMb
            await engine.search(SearchParams(query="mapped"))
        assert await mapped(await engine.store("main")) == {8 << 20}
    assert Settings.load(env={"SESSIONSEARCH_READER_QUIET_MMAP_MB": "64"}).reader_quiet_mmap_mb == 64
    with pytest.raises(InvalidRequest, match="^SESSIONSEARCH_READER_QUIET_MMAP_MB: must be 0 MiB or more, not -1$"):
        Settings.load(env={"SESSIONSEARCH_READER_QUIET_MMAP_MB": "-1"})
    with pytest.raises(InvalidRequest, match="^SESSIONSEARCH_READER_MMAP_MB: must be a whole number of MiB, not '1.5'$"):
        Settings.load(env={"SESSIONSEARCH_READER_MMAP_MB": "1.5"})
    config = tmp_path / "sessionsearch.toml"
    config.write_text("[search]\nreaderQuietMmapMb = -5\n")
    with pytest.raises(InvalidRequest, match="search.readerQuietMmapMb: must be 0 MiB or more, not -5$"):
        Settings.load(config=str(config), env={})


async def test_each_agent_has_its_own_database(tmp_path):  # SQLite only: SQLite's files, WAL and mmap
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey="agent:work_bot:dm", events=chain("w", [("user", "agent words")])))
        await engine.append(AppendParams(sessionKey="global", events=chain("g", [("user", "agent words")])))  # no prefix: agent main
        assert sorted(p.name for p in (tmp_path / "agents").glob("*.db")) == ["main.db", "work_bot.db"]
        assert ids(await engine.search(SearchParams(query="agent", agentId="work_bot"))) == ["w1"]
        assert ids(await engine.search(SearchParams(query="agent", agentId="main"))) == ["g1"]


def _catalog(view) -> tuple:
    """Everything scoping reads from a catalog view, in comparable form."""
    agents = {a: (v.version, sorted(v.keys), sorted(v.windows.items()),
                  {k: [w.wid for w in ws] for k, ws in v.windows_by_key.items()},
                  v.hot_wids, v.incognito_hot, sorted(v.visible_hot), v.visible_cold)
              for a, v in view.agents.items()}
    return agents, sorted(view.catalog.sessions.items()), {k: sorted(c) for k, c in view.catalog.children.items()}


async def test_catalog_refresh_reads_only_changes_and_matches_a_full_read(backend):
    async with engine_at(backend) as reader_engine, engine_at(backend) as writer:
        await writer.append(AppendParams(sessionKey="agent:main:a", events=chain("a", [("user", "alpha note")])))
        await writer.append(AppendParams(sessionKey="agent:main:b", events=chain("b", [("user", "beta note")])))
        await reader_engine.catalog_view(refresh=True)
        steps = [
            lambda: writer.append(AppendParams(sessionKey="agent:main:c", events=chain("c", [("user", "gamma note")]))),  # a new session
            lambda: writer.upsert_session(UpsertParams(sessionKey="agent:main:a", label="renamed", incognito=True)),
            lambda: writer.upsert_session(UpsertParams(sessionKey="agent:main:c", spawnedBy="agent:main:b")),
            lambda: writer.rotate(RotateParams(sessionKey="agent:main:b", sessionId="b-second")),
            lambda: writer.archive(SessionRef(sessionKey="agent:main:c")),
            lambda: writer.restore(SessionRef(sessionKey="agent:main:c")),
            lambda: writer.upsert_session(UpsertParams(sessionKey="agent:main:a", incognito=False)),
            lambda: writer.delete(SessionRef(sessionKey="agent:main:b")),
            lambda: writer.append(AppendParams(sessionKey="agent:main:b", events=chain("n", [("user", "beta again")]))),  # re-created
        ]
        for step in steps:
            await step()
            incremental = await reader_engine.catalog_view(refresh=True)
            async with engine_at(backend) as fresh:  # reads everything
                assert _catalog(incremental) == _catalog(await fresh.catalog_view())
        result = await reader_engine.search(SearchParams(query="note"))
        assert ids(result) == ["a1"] and result["indexing"] is True  # c's restored window needs reconciling
        await writer.reconcile_pending()
        assert sorted(ids(await reader_engine.search(SearchParams(query="note")))) == ["a1", "c1"]


async def test_a_view_reads_again_only_the_agents_whose_metadata_changed(backend):
    async with engine_at(backend) as reader_engine, engine_at(backend) as writer:
        for agent in ("a", "b", "c"):
            await writer.append(AppendParams(sessionKey=f"agent:{agent}:main", events=chain(agent, [("user", f"{agent} note")])))
        assert sorted(ids(await reader_engine.search(SearchParams(query="note")))) == ["a1", "b1", "c1"]
        reads: list[str] = []
        for agent in ("a", "b", "c"):
            store = await reader_engine.store(agent)
            snapshot = store.meta_snapshot

            async def counted(reader, since=None, _agent=agent, _snapshot=snapshot):
                reads.append(_agent)
                return await _snapshot(reader, since)
            store.meta_snapshot = counted  # type: ignore[method-assign]
        # a new session in another process: found stale by its meta version, only b read again
        await writer.append(AppendParams(sessionKey="agent:b:second", events=chain("b2-", [("user", "b second note")])))
        assert sorted(ids(await reader_engine.search(SearchParams(query="note")))) == ["a1", "b1", "b2-1", "c1"]
        assert reads == ["b"]
        # and in this one: only c
        reads.clear()
        await reader_engine.append(AppendParams(sessionKey="agent:c:second", events=chain("c2-", [("user", "c second note")])))
        await reader_engine.upsert_session(UpsertParams(sessionKey="agent:c:main", label="renamed"))
        assert len(ids(await reader_engine.search(SearchParams(query="note")))) == 5
        assert reads == ["c"]
        async with engine_at(backend) as fresh:  # what was read by changes is what a full read holds
            assert _catalog(await reader_engine.catalog_view()) == _catalog(await fresh.catalog_view())


async def test_deletion_tombstones_are_pruned_and_an_older_view_reads_whole(backend, tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_writer, "TOMBSTONES_KEPT", 8)
    monkeypatch.setattr(pg_writer, "TOMBSTONES_KEPT", 8)
    async with engine_at(backend) as reader_engine, engine_at(backend) as writer:
        await writer.append(AppendParams(sessionKey="agent:main:keep", events=chain("k", [("user", "kept note")])))
        await writer.append(AppendParams(sessionKey="agent:main:gone0", events=chain("g", [("user", "gone note")])))
        before = await reader_engine.catalog_view(refresh=True)  # holds gone0, at an old version
        assert "agent:main:gone0" in before.catalog.sessions
        for n in range(12):  # each deletion leaves a session and a window tombstone
            await writer.append(AppendParams(sessionKey=f"agent:main:gone{n}", events=chain(f"g{n}-", [("user", "gone note")])))
            await writer.delete(SessionRef(sessionKey=f"agent:main:gone{n}"))
        store = await writer.store("main")
        ((kept,),) = await sql_rows(store, "SELECT count(*) FROM catalog_deleted", "SELECT count(*) FROM ss_deleted")
        ((horizon,),) = await sql_rows(store, "SELECT value FROM meta WHERE key = 'deleted_from'",
                                       "SELECT deleted_from FROM ss_agents")
        assert kept <= 8 and horizon > before.agents["main"].version  # gone0's tombstones were pruned
        after = await reader_engine.catalog_view(refresh=True)  # by changes it would miss gone0's deletion
        async with engine_at(backend) as fresh:
            assert _catalog(after) == _catalog(await fresh.catalog_view())
        assert list(after.catalog.sessions) == ["agent:main:keep"]
        assert ids(await reader_engine.search(SearchParams(query="note"))) == ["k1"]


async def test_a_search_finds_sessions_and_agents_another_process_created(backend):
    async with engine_at(backend) as serving, engine_at(backend) as importer:
        assert (await serving.search(SearchParams(query="alpha")))["results"] == []  # nothing anywhere yet
        # a new agent's database appears, then a session in an agent the serving view holds empty
        await importer.append(AppendParams(sessionKey="agent:ops:a", events=chain("o", [("user", "alpha from ops")])))
        assert ids(await serving.search(SearchParams(query="alpha"))) == ["o1"]
        await importer.append(AppendParams(sessionKey="agent:main:b", events=chain("b", [("user", "alpha beta")])))
        await importer.delete(SessionRef(sessionKey="agent:main:b"))
        assert ids(await serving.search(SearchParams(query="beta"))) == []
        await importer.append(AppendParams(sessionKey="agent:main:b", events=chain("n", [("user", "beta again")]), sessionId="b-new"))
        assert ids(await serving.search(SearchParams(query="beta"))) == ["n1"]  # re-created after its deletion
        await importer.append(AppendParams(sessionKey="agent:main:c", events=chain("c", [("user", "gamma")])))
        assert ids(await serving.search(SearchParams(query="gamma", sessionKeys=["agent:main:c"]))) == ["c1"]


async def test_an_agent_another_process_just_created_is_searched_read_and_listed(backend):
    """The agent listing a process keeps (PostgreSQL reads it inside each search) never hides an
    agent created elsewhere a moment ago: not by name, not by session, not among every agent."""
    async with engine_at(backend) as serving, engine_at(backend) as other:
        await serving.append(AppendParams(sessionKey="agent:main:a", events=chain("a", [("user", "alpha here")])))
        assert ids(await serving.search(SearchParams(query="alpha"))) == ["a1"]
        await other.append(AppendParams(sessionKey="agent:ops:o", events=chain("o", [("user", "alpha from ops")])))
        assert ids(await serving.search(SearchParams(query="alpha", agentId="ops"))) == ["o1"]
        await other.append(AppendParams(sessionKey="agent:qa:q", events=chain("q", [("user", "alpha from qa")])))
        assert [m["messageId"] for m in (await serving.history(HistoryParams(sessionKey="agent:qa:q")))["messages"]] == ["q1"]
        await other.append(AppendParams(sessionKey="agent:dev:d", events=chain("d", [("user", "alpha from dev")])))
        assert ids(await serving.search(SearchParams(query="alpha", sessionKeys=["agent:dev:d"]))) == ["d1"]
        await other.append(AppendParams(sessionKey="agent:ux:u", events=chain("u", [("user", "alpha from ux")])))
        assert "agent:ux:u" in [s["sessionKey"] for s in (await serving.list_sessions())["sessions"]]
        await other.append(AppendParams(sessionKey="agent:web:w", events=chain("w", [("user", "alpha from web")])))
        assert sorted(ids(await serving.search(SearchParams(query="alpha")))) == ["a1", "d1", "o1", "q1", "u1", "w1"]


async def test_history_decides_on_metadata_another_process_just_wrote(backend):
    async with engine_at(backend) as serving, engine_at(backend) as other:
        await serving.append(AppendParams(sessionKey="agent:main:x", events=chain("x", [("user", "private words")])))
        assert [m["messageId"] for m in (await serving.history(HistoryParams(sessionKey="agent:main:x")))["messages"]] == ["x1"]
        await other.upsert_session(UpsertParams(sessionKey="agent:main:x", incognito=True))
        with pytest.raises(Forbidden):
            await serving.history(HistoryParams(sessionKey="agent:main:x"))
        await other.append(AppendParams(sessionKey="agent:main:y", events=chain("y", [("user", "new elsewhere")])))
        assert [m["messageId"] for m in (await serving.history(HistoryParams(sessionKey="agent:main:y")))["messages"]] == ["y1"]
