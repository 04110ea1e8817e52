"""Numbered migrations of the per-agent SQLite database, each applied in its own transaction."""

from __future__ import annotations

from ..rowids import HIGH, LOW_BITS, LOW_SEQS, SEQ_BITS, from_v1_sql, is_low_v1_sql
from .fts import ASCII_SQL


def ts_max_of(wid: str) -> str:
    """SQL for the newest timestamp among the messages of window `wid` (an SQL expression), read
    from events_ts over the window's two id ranges."""
    return (f"(SELECT max(ts) FROM (SELECT max(ts) AS ts FROM events AS e INDEXED BY events_ts "
            f"WHERE e.text IS NOT NULL "
            f"AND e.id BETWEEN {wid} << {LOW_BITS} AND (({wid} + 1) << {LOW_BITS}) - 1 "
            f"UNION ALL SELECT max(ts) FROM events AS e INDEXED BY events_ts WHERE e.text IS NOT NULL "
            f"AND e.id BETWEEN {HIGH} | ({wid} << {SEQ_BITS + 1}) AND {HIGH} | ((({wid} + 1) << {SEQ_BITS + 1}) - 1)))")


def ts_min_of(wid: str) -> str:
    """SQL for the oldest timestamp among the messages of window `wid`, as ts_max_of."""
    return ts_max_of(wid).replace("max(", "min(")


# a window's ts_max raised to its messages' newest and ts_min lowered to their oldest (a restore
# brings rows back)
TS_MAX_SQL = ("UPDATE windows SET ts_max = max(coalesce(ts_max, {x}), coalesce({x}, ts_max)), "
              "ts_min = min(coalesce(ts_min, {n}), coalesce({n}, ts_min)) "
              "WHERE wid = :wid").format(x=ts_max_of(":wid"), n=ts_min_of(":wid"))
# The order of magnitude of a window's time span (the digits of ts_max - ts_min), which migration
# 14's index leads with: scope.id_bounds finds the windows overlapping a range one class at a time.
SPAN_DIGITS = "length(ts_max - ts_min)"

MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (1, "transcripts_and_index", """
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO meta VALUES ('meta_version', 1);

CREATE TABLE sessions (
    session_key TEXT PRIMARY KEY,
    current_wid INTEGER,
    label TEXT,
    display_name TEXT,
    spawned_by TEXT,
    parent_session_key TEXT,
    kind TEXT,
    grp TEXT,
    incognito INTEGER NOT NULL DEFAULT 0,
    archived_at INTEGER,
    updated_at INTEGER NOT NULL,
    extra TEXT
);

-- One row per session window (a session id); the index state lives beside the transcript state.
CREATE TABLE windows (
    wid INTEGER PRIMARY KEY,
    session_key TEXT NOT NULL,
    session_id TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    leaf_seq INTEGER,
    leaf_event_id TEXT,
    has_header INTEGER NOT NULL DEFAULT 0,
    messages INTEGER NOT NULL DEFAULT 0,
    source_lines INTEGER NOT NULL DEFAULT 0,
    cold INTEGER NOT NULL DEFAULT 0,
    needs_rebuild INTEGER NOT NULL DEFAULT 0,
    rebuild_gen INTEGER NOT NULL DEFAULT 0,
    indexed_seq INTEGER NOT NULL DEFAULT 0,
    indexed_leaf INTEGER,
    claim_token TEXT,
    claim_expires_at REAL
);
CREATE INDEX windows_by_key ON windows (session_key);
CREATE INDEX windows_dirty ON windows (wid) WHERE needs_rebuild = 1;

-- Transcript rows. id = wid << 31 | seq << 1 | assistant (6 changes it, rowids.py); on_branch is the
-- active-branch projection, kept current by every write.
CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    wid INTEGER NOT NULL,
    event_id TEXT,
    parent_seq INTEGER,
    node_seq INTEGER,
    type TEXT NOT NULL,
    role TEXT,
    ts INTEGER NOT NULL,
    on_branch INTEGER NOT NULL DEFAULT 0,
    text TEXT,
    body TEXT NOT NULL
);
CREATE INDEX events_by_event_id ON events (wid, event_id) WHERE event_id IS NOT NULL;

-- The full-text index: one row per indexed message, rowid = the message's events.id. The
-- timestamp and message id ride along unindexed so a search never needs the events table.
CREATE VIRTUAL TABLE msg_fts USING fts5 (
    text, ts UNINDEXED, mid UNINDEXED, tokenize = 'unicode61 remove_diacritics 2');
"""),
    (2, "dirty_version", """
-- Bumped whenever the set of windows needing reconciliation changes, so a search can tell
-- whether the list it holds is still current without reading it again.
INSERT INTO meta VALUES ('dirty_version', 1);
"""),
    (3, "catalog_changes", """
-- What changed in the session catalog since a meta version: rows are stamped (by triggers, so no
-- write path can forget) with a number above the meta version their transaction started from,
-- and deletions leave a tombstone, so a search process reads only what changed since its view.
ALTER TABLE sessions ADD COLUMN meta_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE windows ADD COLUMN meta_seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX sessions_by_meta_seq ON sessions (meta_seq);
CREATE INDEX windows_by_meta_seq ON windows (meta_seq);
CREATE TABLE catalog_deleted (kind TEXT NOT NULL, name TEXT NOT NULL, meta_seq INTEGER NOT NULL,
                              PRIMARY KEY (kind, name));
CREATE TRIGGER sessions_stamp_insert AFTER INSERT ON sessions BEGIN
    UPDATE sessions SET meta_seq = (SELECT value FROM meta WHERE key = 'meta_version') + 1
    WHERE session_key = NEW.session_key;
END;
CREATE TRIGGER sessions_stamp_update AFTER UPDATE OF current_wid, label, display_name, spawned_by,
    parent_session_key, kind, grp, incognito, archived_at, updated_at ON sessions BEGIN
    UPDATE sessions SET meta_seq = (SELECT value FROM meta WHERE key = 'meta_version') + 1
    WHERE session_key = NEW.session_key;
END;
CREATE TRIGGER sessions_stamp_delete AFTER DELETE ON sessions BEGIN
    INSERT OR REPLACE INTO catalog_deleted VALUES ('session', OLD.session_key,
        (SELECT value FROM meta WHERE key = 'meta_version') + 1);
END;
CREATE TRIGGER windows_stamp_insert AFTER INSERT ON windows BEGIN
    UPDATE windows SET meta_seq = (SELECT value FROM meta WHERE key = 'meta_version') + 1 WHERE wid = NEW.wid;
END;
CREATE TRIGGER windows_stamp_update AFTER UPDATE OF session_key, session_id, cold ON windows BEGIN
    UPDATE windows SET meta_seq = (SELECT value FROM meta WHERE key = 'meta_version') + 1 WHERE wid = NEW.wid;
END;
CREATE TRIGGER windows_stamp_delete AFTER DELETE ON windows BEGIN
    INSERT OR REPLACE INTO catalog_deleted VALUES ('window', CAST(OLD.wid AS TEXT),
        (SELECT value FROM meta WHERE key = 'meta_version') + 1);
END;
"""),
    (4, "tombstone_horizon", """
-- Tombstones are pruned to the newest few thousand; a view read before the oldest kept one
-- (meta version below deleted_from) reads the catalog whole instead of by changes.
INSERT INTO meta VALUES ('deleted_from', 0);
CREATE INDEX catalog_deleted_by_seq ON catalog_deleted (meta_seq);
"""),
    (5, "hot_words", """
-- Postings of common words in the order their one-word searches rank (store/sqlite/postings.py): by
-- term frequency, then row length. Built from the FTS index by `optimize`; rows indexed after a
-- word's build are listed in index_log (only while meta index_log is not 0) and scored by
-- FTS5 beside the postings.
CREATE TABLE hot_words (
    word TEXT PRIMARY KEY,
    wno INTEGER NOT NULL UNIQUE,
    log_seq INTEGER NOT NULL,      -- index_log rows up to this one are in the postings
    tfs TEXT NOT NULL,             -- JSON list of the term frequencies present
    docs INTEGER NOT NULL,
    built_at INTEGER NOT NULL
);
CREATE TABLE hot_postings (
    wno INTEGER NOT NULL, tf INTEGER NOT NULL, dl INTEGER NOT NULL, rid INTEGER NOT NULL,
    PRIMARY KEY (wno, tf, dl, rid)
) WITHOUT ROWID;
CREATE TABLE index_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, rid INTEGER NOT NULL);
INSERT INTO meta VALUES ('index_log', 0);
-- Bumped on any change to hot_words, so a search process can tell whether the list of usable
-- words it holds is current without reading it again (triggers: no write path can forget).
INSERT INTO meta VALUES ('hot_version', 0);
CREATE TRIGGER hot_words_insert AFTER INSERT ON hot_words BEGIN
    UPDATE meta SET value = value + 1 WHERE key = 'hot_version';
END;
CREATE TRIGGER hot_words_update AFTER UPDATE ON hot_words BEGIN
    UPDATE meta SET value = value + 1 WHERE key = 'hot_version';
END;
CREATE TRIGGER hot_words_delete AFTER DELETE ON hot_words BEGIN
    UPDATE meta SET value = value + 1 WHERE key = 'hot_version';
END;
"""),
    (6, "dense_row_ids", f"""
-- Row ids move to the packed layout of rowids.py (a window's first 65,536 seqs at wid << 17, the
-- rest at 2^62 | wid << 31), which makes FTS5's doclists dense. Every transcript and index row is
-- copied under its new id, low region first, each in id order; the postings, whose row ids are
-- the old ones, are dropped (`optimize` builds them again). Cold files keep the old ids and are
-- rewritten as they are restored (rowids.is_v1).
CREATE TABLE events_v6 (
    id INTEGER PRIMARY KEY,
    wid INTEGER NOT NULL,
    event_id TEXT,
    parent_seq INTEGER,
    node_seq INTEGER,
    type TEXT NOT NULL,
    role TEXT,
    ts INTEGER NOT NULL,
    on_branch INTEGER NOT NULL DEFAULT 0,
    text TEXT,
    body TEXT NOT NULL
);
INSERT INTO events_v6 SELECT {from_v1_sql("id")}, wid, event_id, parent_seq, node_seq, type, role, ts,
    on_branch, text, body FROM events WHERE {is_low_v1_sql("id")} ORDER BY id;
INSERT INTO events_v6 SELECT {from_v1_sql("id")}, wid, event_id, parent_seq, node_seq, type, role, ts,
    on_branch, text, body FROM events WHERE NOT {is_low_v1_sql("id")} ORDER BY id;
DROP TABLE events;
ALTER TABLE events_v6 RENAME TO events;
CREATE INDEX events_by_event_id ON events (wid, event_id) WHERE event_id IS NOT NULL;
CREATE VIRTUAL TABLE msg_fts_v6 USING fts5 (
    text, ts UNINDEXED, mid UNINDEXED, tokenize = 'unicode61 remove_diacritics 2');
INSERT INTO msg_fts_v6 (rowid, text, ts, mid) SELECT {from_v1_sql("rowid")}, text, ts, mid FROM msg_fts
    WHERE {is_low_v1_sql("rowid")} ORDER BY rowid;
INSERT INTO msg_fts_v6 (rowid, text, ts, mid) SELECT {from_v1_sql("rowid")}, text, ts, mid FROM msg_fts
    WHERE NOT {is_low_v1_sql("rowid")} ORDER BY rowid;
DROP TABLE msg_fts;
ALTER TABLE msg_fts_v6 RENAME TO msg_fts;
DELETE FROM hot_postings;
DELETE FROM hot_words;
DELETE FROM index_log;
UPDATE meta SET value = 0 WHERE key = 'index_log';
-- The windows with rows in the high region: a scoped search looks there only if one is in scope.
CREATE INDEX windows_long ON windows (wid) WHERE last_seq >= {LOW_SEQS};
"""),
    (7, "recent_by_ts", """
-- `recent` sorts every match by timestamp: read from this narrow index, not from the FTS5 content
-- rows (whose text comes first), the sort costs half (bench/bench_search.py, recent class).
CREATE INDEX events_ts ON events (id, ts) WHERE text IS NOT NULL;
"""),
    (8, "time_ranges", """
-- `since`/`until` narrow the FTS5 scan to the row ids of the messages in the time range, read from
-- here (store/scope.py, id_bounds), instead of testing every row of a word against the range.
CREATE INDEX events_by_ts ON events (ts) WHERE text IS NOT NULL;
"""),
    (9, "cjk_shadow_tokens", f"""
-- Index rows hold the index form of their text (store/cjk.py: folded, each CJK run replaced by its
-- shadow tokens). The rows whose text it changes are dropped from the index and their windows handed
-- to reconciliation, which indexes them again: searches leave those windows out and answer
-- `indexing: true` meanwhile. The rest of the index stays as it is, so opening an upgraded store costs
-- one scan of the message text and the deletion of its CJK rows, not a rebuild.
-- `needs_fold` is store/cjk.py's, registered on the writer's connection.
CREATE TEMP TABLE cjk_rows AS SELECT id, wid, on_branch FROM events
    WHERE text IS NOT NULL AND NOT {ASCII_SQL} AND needs_fold(text);
UPDATE windows SET needs_rebuild = 1, rebuild_gen = rebuild_gen + 1
    WHERE needs_rebuild = 0 AND cold = 0 AND wid IN (SELECT wid FROM cjk_rows WHERE on_branch = 1);
DELETE FROM msg_fts WHERE rowid IN (SELECT id FROM cjk_rows);
DROP TABLE cjk_rows;
UPDATE meta SET value = value + 1 WHERE key = 'dirty_version';
"""),
    (10, "window_ts_max", f"""
-- `recent` visits only the windows that can hold the newest matches (store/sqlite/recent.py): each
-- window's ts_max bounds the timestamps of its messages. Appends raise it (the window's own UPDATE)
-- and a restore sets it from the rows brought back; it never goes down, a bound is all it must be.
ALTER TABLE windows ADD COLUMN ts_max INTEGER;
UPDATE windows SET ts_max = {ts_max_of("windows.wid")};
CREATE INDEX windows_by_ts_max ON windows (ts_max, wid);
"""),
    (11, "prefix_postings", """
-- Capped postings of common 2-4 letter prefixes (store/sqlite/prefixes.py): per term-frequency
-- run of the prefix phrase, its shortest rows. n_rows and docs are the index's rows and the rows
-- matching the prefix as of index_log position log_seq (the build's snapshot).
CREATE TABLE prefix_words (
    prefix TEXT PRIMARY KEY,
    pno INTEGER NOT NULL UNIQUE,
    log_seq INTEGER NOT NULL,      -- index_log rows up to this one are in the postings; -1: stale
    n_rows INTEGER NOT NULL,
    docs INTEGER NOT NULL,
    runs TEXT NOT NULL,            -- JSON {tf: length of the first row left out}, per run cut short
    built_at INTEGER NOT NULL
);
CREATE TABLE prefix_postings (
    pno INTEGER NOT NULL, tf INTEGER NOT NULL, dl INTEGER NOT NULL, rid INTEGER NOT NULL,
    PRIMARY KEY (pno, tf, dl, rid)
) WITHOUT ROWID;
"""),
    (12, "index_gone", """
-- Index rows deleted while the prefixes' postings are usable, with their indexed text: searches
-- take them out of a prefix's document count and rows, and the worker folds them into the
-- postings (store/sqlite/prefixes.py), instead of giving the postings up at the first delete.
-- `after` orders a deletion among the rows indexed: after index_log's rows up to it, before the next.
CREATE TABLE index_gone (
    gseq INTEGER PRIMARY KEY AUTOINCREMENT,
    rid INTEGER NOT NULL,
    after INTEGER NOT NULL,
    text TEXT NOT NULL
);
-- index_gone rows up to this one are in the postings (a build before this migration: none are)
ALTER TABLE prefix_words ADD COLUMN gone_seq INTEGER NOT NULL DEFAULT 0;
"""),
    (13, "time_ranges_covering", """
-- `since`/`until` read the id span of a range from this index alone (store/sqlite/scope.py, id_bounds).
-- events_by_ts (8) is partial, so on SQLite 3.40 every entry read cost a lookup of its events row
-- to test the index's own `text IS NOT NULL` (15-21 ms for a range of 7,000-15,000 messages at
-- 1,000,000). This one holds every event: the span of all events in a range bounds its messages.
CREATE INDEX events_all_by_ts ON events (ts);
DROP INDEX events_by_ts;
"""),
    (14, "window_ts_min", f"""
-- `since`/`until` read the id span of a range from the windows it overlaps (store/sqlite/scope.py,
-- id_bounds), not from every event in it: each window's ts_min bounds its messages' timestamps from
-- below as ts_max (10) does from above. Appends lower it, a restore sets it from the rows brought
-- back. The index holds windows by the order of magnitude of their span, then ts_min: a window of
-- span < 10^d overlapping [since, until) has since - 10^d < ts_min < until, one range per d.
ALTER TABLE windows ADD COLUMN ts_min INTEGER;
UPDATE windows SET ts_min = {ts_min_of("windows.wid")};
CREATE INDEX windows_by_span ON windows ({SPAN_DIGITS}, ts_min, ts_max, wid, last_seq);
"""),
    (15, "meaning_index", """
-- The meaning index (SPEC §3): an embedding per word-index row, keyed by the same row id, made by the
-- workers. A row id names one immutable transcript row, so an embedding stays right for as long as
-- the row exists; whether it answers is the word index's say (a rewound-away row leaves msg_fts and
-- so never answers, and answers again with the same embedding if the branch comes back). Vectors
-- are int8 with a per-row scale (a unit vector's largest component / 127): a quarter of float32's
-- size, and exact top-25 against float32 keeps ~0.99 of the neighbours (bench/bench_semantic.py).
-- `needs_embed` marks windows with word-index rows lacking an embedding of the current model
-- (meta embed_model); live appends and reconciliation set it, the embed job clears it under its
-- own claim (embed_token), apart from reconciliation's.
ALTER TABLE windows ADD COLUMN needs_embed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE windows ADD COLUMN embed_token TEXT;
ALTER TABLE windows ADD COLUMN embed_expires_at REAL;
CREATE INDEX windows_embed ON windows (wid) WHERE needs_embed = 1;
UPDATE windows SET needs_embed = 1 WHERE cold = 0 AND messages > 0;
CREATE TABLE embed_models (mno INTEGER PRIMARY KEY, model TEXT NOT NULL UNIQUE, dims INTEGER NOT NULL);
INSERT INTO meta VALUES ('embed_model', 0);
-- bumped by every transaction storing embeddings, whose rows carry it: a search process reads only
-- the rows stored after the ones it holds (search/meaning.py)
INSERT INTO meta VALUES ('embed_seq', 0);
CREATE TABLE embeddings (
    rid INTEGER PRIMARY KEY,
    mno INTEGER NOT NULL,
    eseq INTEGER NOT NULL,
    ts INTEGER NOT NULL,
    scale REAL NOT NULL,
    vec BLOB NOT NULL
);
CREATE INDEX embeddings_by_eseq ON embeddings (eseq);
-- deleted embeddings (a session deleted or archived), so a search process drops them from memory
CREATE TABLE embed_gone (gseq INTEGER PRIMARY KEY AUTOINCREMENT, rid INTEGER NOT NULL);
CREATE TRIGGER embeddings_gone AFTER DELETE ON embeddings BEGIN
    INSERT INTO embed_gone (rid) VALUES (OLD.rid);
END;
"""),
    (16, "score_bounds", """
-- Per term of the index: its document count, highest frequency in a row and shortest row holding
-- it, as of the index state in bounds_state (store/sqlite/bounds.py): bounds on the bm25 of the
-- agent's rows, by which a search of many agents passes over those that cannot make its top hits.
-- Kept by the worker's postings check; stale (unused) from the index's next write on.
CREATE TABLE term_bounds (
    term TEXT PRIMARY KEY,
    docs INTEGER NOT NULL,
    max_tf INTEGER NOT NULL,
    min_dl INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE bounds_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    structure BLOB NOT NULL,       -- FTS5's structure record (msg_fts_data id 10) as of the fold
    averages BLOB NOT NULL,        -- and its averages record (id 1)
    folded_at REAL NOT NULL,       -- when (epoch s) and
    fold_s REAL NOT NULL           -- how long the fold took: the next waits FOLD_AFTER times as long
);
"""),
    (17, "bounds_log", """
-- The rows indexed since the fold (store/sqlite/bounds.py): while `logged` is 1, every row indexed
-- since is in bounds_log and none was deleted, so the bounds still hold with those rows' own
-- terms added, and a search of many agents need not read a written agent whole until the next
-- fold. A deletion, or more than BOUNDS_LOG_MAX rows (postings.py), sets `logged` to 0 and empties
-- the log.
ALTER TABLE bounds_state ADD COLUMN logged INTEGER NOT NULL DEFAULT 0;
CREATE TABLE bounds_log (rid INTEGER PRIMARY KEY);
"""),
    (18, "packed_embeddings", """
-- The embeddings folded into blocks (store/packed.py): a cold search process reads these few large
-- rows, then the per-row table after the fold's counters. vec_fold is the one fold (gen counts them,
-- so a fold built meanwhile by another process is not overwritten by an older one); its blocks are
-- those of `stage`, written a few at a time beforehand (a fold of a million rows is 256 MB: in one
-- transaction it held the writer, and every append, for seconds), the other stages' removed after.
CREATE TABLE vec_fold (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    gen INTEGER NOT NULL,
    stage INTEGER NOT NULL,
    mno INTEGER NOT NULL,
    embed_seq INTEGER NOT NULL,
    gone_seq INTEGER NOT NULL,
    rows INTEGER NOT NULL
);
CREATE TABLE vec_blocks (id INTEGER PRIMARY KEY, stage INTEGER NOT NULL, bno INTEGER NOT NULL, n INTEGER NOT NULL,
    rids BLOB NOT NULL, ts BLOB NOT NULL, scales BLOB NOT NULL, vecs BLOB NOT NULL);
CREATE UNIQUE INDEX vec_blocks_by_stage ON vec_blocks (stage, bno);
"""),
)
