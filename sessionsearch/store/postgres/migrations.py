"""The PostgreSQL store's schema as numbered migrations, in the order they apply (migrate.py
applies and records them). Each script is the change it made and why; a migration once
released is never edited, only followed by another.

Every agent lives in the same tables, keyed by its number (`ano`). Window ids come from one
sequence, so a row id (rowids.py) is unique across agents too.
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (1, "transcripts_and_index", """
CREATE TABLE ss_agents (
    ano serial PRIMARY KEY,
    agent_id text NOT NULL UNIQUE,
    created_at bigint NOT NULL,
    meta_version bigint NOT NULL DEFAULT 1,
    meta_txid bigint,                      -- the transaction that moved meta_version last
    deleted_from bigint NOT NULL DEFAULT 0 -- views older than this read the catalog whole
);

CREATE TABLE ss_sessions (
    ano integer NOT NULL REFERENCES ss_agents,
    session_key text NOT NULL,
    current_wid bigint,
    label text,
    display_name text,
    spawned_by text,
    parent_session_key text,
    kind text,
    grp text,
    incognito integer NOT NULL DEFAULT 0,
    archived_at bigint,
    updated_at bigint NOT NULL,
    extra text,
    meta_seq bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (ano, session_key)
);
CREATE INDEX ss_sessions_by_meta_seq ON ss_sessions (ano, meta_seq);

-- One row per session window; the index state lives beside the transcript state, and so do the
-- window's share of the agent's BM25 statistics (idx_rows, idx_tokens): no agent-wide counter row
-- that every append would have to update.
CREATE TABLE ss_windows (
    wid bigserial PRIMARY KEY,
    ano integer NOT NULL REFERENCES ss_agents,
    session_key text NOT NULL,
    session_id text NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    last_seq integer NOT NULL DEFAULT 0,
    leaf_seq integer,
    leaf_event_id text,
    has_header integer NOT NULL DEFAULT 0,
    messages integer NOT NULL DEFAULT 0,
    source_lines integer NOT NULL DEFAULT 0,
    cold integer NOT NULL DEFAULT 0,
    needs_rebuild integer NOT NULL DEFAULT 0,
    rebuild_gen integer NOT NULL DEFAULT 0,
    indexed_seq integer NOT NULL DEFAULT 0,
    indexed_leaf integer,
    claim_token text,
    claim_expires_at double precision,
    idx_rows bigint NOT NULL DEFAULT 0,
    idx_tokens bigint NOT NULL DEFAULT 0,
    meta_seq bigint NOT NULL DEFAULT 0,
    UNIQUE (ano, session_id)
);
CREATE INDEX ss_windows_by_key ON ss_windows (ano, session_key);
CREATE INDEX ss_windows_dirty ON ss_windows (ano, wid) WHERE needs_rebuild = 1;
CREATE INDEX ss_windows_by_meta_seq ON ss_windows (ano, meta_seq);

-- Transcript rows; id packs wid, seq and role (rowids.py); on_branch is the active branch.
CREATE TABLE ss_events (
    id bigint PRIMARY KEY,
    wid bigint NOT NULL,
    event_id text,
    parent_seq integer,
    node_seq integer,
    type text NOT NULL,
    role text,
    ts bigint NOT NULL,
    on_branch integer NOT NULL DEFAULT 0,
    text text,
    body text NOT NULL
);
CREATE INDEX ss_events_by_event_id ON ss_events (wid, event_id) WHERE event_id IS NOT NULL;

-- The index: one row per indexed message, id = its ss_events.id. tsv holds the message's folded
-- tokens with their positions (lexemes as text.py's tokens() makes them, written as a tsvector
-- literal, never parsed by a text search configuration), tf their exact counts and dl the row's
-- length in tokens, which BM25 needs (lexemes.py).
CREATE TABLE ss_index (
    id bigint PRIMARY KEY,
    ano integer NOT NULL,
    wid bigint NOT NULL,
    ts bigint NOT NULL,
    mid text,
    dl integer NOT NULL,
    tf jsonb NOT NULL,
    tsv tsvector NOT NULL
);
-- The GIN index is the only way into the index rows by content: an index on (ano, ts) tempted
-- the planner into filtering every row of the agent (before statistics existed) or walking the
-- timestamps past every row a rare word lacks (`recent`).
CREATE INDEX ss_index_tsv ON ss_index USING gin (tsv);

-- Archived windows: their rows as gzip'd JSON lines, out of ss_events and the index.
CREATE TABLE ss_cold (
    wid bigint PRIMARY KEY,
    data bytea NOT NULL
);

-- Deleted sessions and windows, for views refreshing by changes.
CREATE TABLE ss_deleted (
    ano integer NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    meta_seq bigint NOT NULL,
    PRIMARY KEY (ano, kind, name)
);
CREATE INDEX ss_deleted_by_seq ON ss_deleted (ano, meta_seq);

-- The agent's meta version, moved once per transaction that changes its catalog; the row stays
-- locked until that transaction ends, so stamps commit in version order.
CREATE FUNCTION ss_meta_stamp(p_ano integer) RETURNS bigint LANGUAGE sql AS $$
    UPDATE ss_agents SET meta_version = CASE WHEN meta_txid = txid_current() THEN meta_version
                                             ELSE meta_version + 1 END,
                         meta_txid = txid_current()
    WHERE ano = p_ano RETURNING meta_version
$$;
CREATE FUNCTION ss_stamp_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.meta_seq := ss_meta_stamp(NEW.ano);
    RETURN NEW;
END $$;
CREATE FUNCTION ss_tombstone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ss_deleted VALUES (OLD.ano, TG_ARGV[0], to_jsonb(OLD) ->> TG_ARGV[1], ss_meta_stamp(OLD.ano))
    ON CONFLICT (ano, kind, name) DO UPDATE SET meta_seq = EXCLUDED.meta_seq;
    RETURN OLD;
END $$;
CREATE TRIGGER ss_sessions_stamp BEFORE INSERT OR UPDATE ON ss_sessions
    FOR EACH ROW EXECUTE FUNCTION ss_stamp_row();
CREATE TRIGGER ss_sessions_gone AFTER DELETE ON ss_sessions
    FOR EACH ROW EXECUTE FUNCTION ss_tombstone('session', 'session_key');
CREATE TRIGGER ss_windows_stamp_insert BEFORE INSERT ON ss_windows
    FOR EACH ROW EXECUTE FUNCTION ss_stamp_row();
CREATE TRIGGER ss_windows_stamp_update BEFORE UPDATE ON ss_windows FOR EACH ROW
    WHEN ((OLD.session_key, OLD.session_id, OLD.cold) IS DISTINCT FROM (NEW.session_key, NEW.session_id, NEW.cold))
    EXECUTE FUNCTION ss_stamp_row();
CREATE TRIGGER ss_windows_gone AFTER DELETE ON ss_windows
    FOR EACH ROW EXECUTE FUNCTION ss_tombstone('window', 'wid');
"""),
    (2, "gin_without_pending_list", """
-- With fastupdate on, rows indexed since the last vacuum wait in the GIN index's pending list,
-- which every search reads whole: 24 ms for a word in 5 rows at 20,000 fresh messages. Live
-- indexing keeps that list full, so each row goes into the index tree at once instead.
ALTER INDEX ss_index_tsv SET (fastupdate = off);
SELECT gin_clean_pending_list('ss_index_tsv'::regclass);
DROP INDEX IF EXISTS ss_index_recent;
"""),
    (3, "window_ts_max_and_index_gen", """
-- What each window's index rows changed keeps on the window's own row (no agent-wide row that
-- every write would update), maintained by statement triggers on the index, whatever path writes:
-- ts_max, an upper bound on the timestamps of the window's index rows (raised by every insert,
-- never lowered: a bound, as SQLite's windows.ts_max), which lets `recent` walk windows newest
-- first and stop (recent.py); idx_gen, a stamp from a sequence set anew by every insert or delete
-- of its index rows, so that (count(windows), sum(idx_gen)) moves with every change of the
-- agent's index rows, and a document count read at one value holds while it does (search.py).
-- Index rows of a window that is gone (orphans, until the sweep) move the agent's idx_epoch.
ALTER TABLE ss_windows ADD COLUMN ts_max bigint NOT NULL DEFAULT -9223372036854775808,
                       ADD COLUMN idx_gen bigint NOT NULL DEFAULT 0;
ALTER TABLE ss_agents ADD COLUMN idx_epoch bigint NOT NULL DEFAULT 0;
CREATE SEQUENCE ss_idx_gen;
UPDATE ss_windows w SET ts_max = i.ts FROM (SELECT wid, max(ts) AS ts FROM ss_index GROUP BY wid) i WHERE i.wid = w.wid;
CREATE INDEX ss_windows_by_ts_max ON ss_windows (ano, ts_max, wid);
-- Every search sums the agent's windows (search.py's head): read from this index alone (an
-- index-only scan, 0.6 ms instead of 1.3 at 2,200 windows) where the pages are all-visible.
CREATE INDEX ss_windows_stats ON ss_windows (ano) INCLUDE (wid, needs_rebuild, idx_rows, idx_tokens, idx_gen);

CREATE FUNCTION ss_index_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    windows integer;
    touched integer;
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE ss_windows w SET ts_max = greatest(w.ts_max, c.ts), idx_gen = nextval('ss_idx_gen')
        FROM (SELECT wid, max(ts) AS ts FROM changed GROUP BY wid) c WHERE w.wid = c.wid;
    ELSE
        UPDATE ss_windows w SET idx_gen = nextval('ss_idx_gen') WHERE w.wid IN (SELECT wid FROM changed);
    END IF;
    GET DIAGNOSTICS touched = ROW_COUNT;
    SELECT count(DISTINCT wid) INTO windows FROM changed;
    IF touched < windows THEN
        UPDATE ss_agents SET idx_epoch = idx_epoch + 1 WHERE ano IN
            (SELECT c.ano FROM changed c WHERE NOT EXISTS (SELECT 1 FROM ss_windows w WHERE w.wid = c.wid));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER ss_index_added AFTER INSERT ON ss_index REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION ss_index_changed();
CREATE TRIGGER ss_index_removed AFTER DELETE ON ss_index REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION ss_index_changed();
"""),
    (4, "bulk_writes", """
-- Index rows go to the GIN index's pending list again, but a short one: the insert that finds it
-- over 64 kB moves it into the tree, in bulk, sorted by lexeme. That costs half of inserting each
-- row's lexemes into the tree one by one (fastupdate off, migration 2), which was most of an
-- import's reconciliation; a search reads at most those 64 kB (the 4 MB default cost 24 ms).
ALTER INDEX ss_index_tsv SET (fastupdate = on, gin_pending_list_limit = 64);

-- The window a write to a session goes to, in one round trip instead of five: the session row
-- locked (made if missing), the window named by p_session_id (or the session's current one, or
-- a new one called p_new_id), and that window's row locked, with what an append plans from.
-- conflict: p_session_id is a window of another session (nothing returned is to be used).
CREATE FUNCTION ss_window_for_write(p_ano integer, p_key text, p_session_id text, p_new_id text, p_now bigint,
    OUT wid bigint, OUT session_id text, OUT last_seq integer, OUT leaf_seq integer, OUT leaf_event_id text,
    OUT has_header integer, OUT cold integer, OUT conflict boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_current bigint;
    v_key text;
BEGIN
    conflict := false;
    SELECT s.current_wid INTO v_current FROM ss_sessions s WHERE s.ano = p_ano AND s.session_key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO ss_sessions (ano, session_key, updated_at) VALUES (p_ano, p_key, p_now) ON CONFLICT DO NOTHING;
        SELECT s.current_wid INTO v_current FROM ss_sessions s
            WHERE s.ano = p_ano AND s.session_key = p_key FOR UPDATE;
    END IF;
    IF p_session_id IS NOT NULL THEN
        SELECT w.wid, w.session_key INTO wid, v_key FROM ss_windows w WHERE w.ano = p_ano AND w.session_id = p_session_id;
        IF FOUND AND v_key <> p_key THEN
            conflict := true;
            RETURN;
        END IF;
        IF FOUND AND v_current IS NULL THEN
            UPDATE ss_sessions s SET current_wid = wid WHERE s.ano = p_ano AND s.session_key = p_key;
        END IF;
    ELSE
        wid := v_current;
    END IF;
    IF wid IS NULL THEN
        INSERT INTO ss_windows AS w (ano, session_key, session_id, created_at, updated_at)
            VALUES (p_ano, p_key, coalesce(p_session_id, p_new_id), p_now, p_now) RETURNING w.wid INTO wid;
        UPDATE ss_sessions s SET current_wid = wid, updated_at = p_now WHERE s.ano = p_ano AND s.session_key = p_key;
    END IF;
    SELECT w.session_id, w.last_seq, w.leaf_seq, w.leaf_event_id, w.has_header, w.cold
        INTO session_id, last_seq, leaf_seq, leaf_event_id, has_header, cold
        FROM ss_windows w WHERE w.wid = ss_window_for_write.wid FOR UPDATE;
END $$;
"""),  # noqa: E501
    (5, "postings", """
-- Every index row written from now on takes the next number of one sequence (no row that writers
-- share: a sequence hands out numbers without waiting for anyone's commit). The function takes
-- the transaction's id before the number, so a postings build that waited for every transaction
-- with an older id to end sees every row numbered before its mark (postings_build.py). Rows
-- written before this migration stay NULL: older than any build.
CREATE SEQUENCE ss_index_iseq;
CREATE FUNCTION ss_next_iseq() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT nextval('ss_index_iseq') WHERE txid_current() IS NOT NULL
$$;
ALTER TABLE ss_index ADD COLUMN iseq bigint;
ALTER TABLE ss_index ALTER COLUMN iseq SET DEFAULT ss_next_iseq();
CREATE INDEX ss_index_by_iseq ON ss_index (ano, iseq);

-- The last postings build of an agent: its mark (rows numbered above it came after it), the
-- agent's index rows at or below the mark as the window counters give them, and their tokens.
CREATE TABLE ss_postings_built (
    ano integer PRIMARY KEY,
    mark bigint NOT NULL,
    old_rows bigint NOT NULL,
    built_at bigint NOT NULL
);
-- Per common word (kind 0) or 2-4 letter prefix (kind 1): the rows at or below the mark holding
-- it (docs), the shortest rows of each run of equal frequency (ids, tfs, dls) and, per run cut
-- short, the length of its first row left out (cut: {tf: dl}).
CREATE TABLE ss_postings (
    ano integer NOT NULL,
    kind smallint NOT NULL,
    key text NOT NULL,
    docs bigint NOT NULL,
    cut jsonb NOT NULL,
    ids bigint[] NOT NULL,
    tfs integer[] NOT NULL,
    dls integer[] NOT NULL,
    PRIMARY KEY (ano, kind, key)
);
"""),
    (6, "search_head", """
-- A search's head (search.py) without summing every window of the agent on each search (10,000
-- windows at 1,000,000 messages: milliseconds a search). The counters a search reads are summed
-- once and kept by the process, which checks them in each search: each window records the
-- transaction that last changed its index counters (idx_xid, set by the trigger below whatever
-- path writes), and a transaction that a snapshot S did not see has an id at or above S's xmin.
-- So if the agent's meta version and epoch (windows created or deleted, orphans) are as at S and
-- its windows with idx_xid >= xmin(S) are the same (window, idx_xid) pairs as at S, the sums are
-- S's: one short index range, not a scan. Else they are summed again, in the same call.
ALTER TABLE ss_windows ADD COLUMN idx_xid xid8 NOT NULL DEFAULT '0';
CREATE INDEX ss_windows_by_idx_xid ON ss_windows (ano, idx_xid);
CREATE FUNCTION ss_windows_idx_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.idx_xid := pg_current_xact_id();
    RETURN NEW;
END $$;
CREATE TRIGGER ss_windows_idx_changed BEFORE UPDATE ON ss_windows FOR EACH ROW
    WHEN ((OLD.idx_rows, OLD.idx_tokens, OLD.idx_gen) IS DISTINCT FROM (NEW.idx_rows, NEW.idx_tokens, NEW.idx_gen))
    EXECUTE FUNCTION ss_windows_idx_xid();

-- The head: the agent's meta version, windows needing reconciliation, BM25 counters (rows,
-- tokens), the index state a cached document count is checked against (windows, gen, epoch), the
-- agent listing's version (its highest number), and the state the caller keeps for the next call
-- (at: the snapshot's xmin; recent: 'wid:idx_xid' of the windows changed at or after it). The
-- caller passes what it kept (NULLs when nothing); it gets its counters back when they hold. A
-- function: its statements are planned once per connection, not with every search.
CREATE FUNCTION ss_search_head(p_ano integer, p_version bigint, p_epoch bigint, p_at text, p_recent text[],
    p_rows bigint, p_tokens bigint, p_windows bigint, p_gen numeric,
    OUT version bigint, OUT dirty bigint[], OUT rows bigint, OUT tokens bigint, OUT windows bigint,
    OUT gen numeric, OUT epoch bigint, OUT listing integer, OUT at text, OUT recent text[])
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT a.meta_version, a.idx_epoch INTO version, epoch FROM ss_agents a WHERE a.ano = p_ano;
    SELECT max(a.ano) INTO listing FROM ss_agents a;
    SELECT coalesce(array_agg(w.wid), '{}') INTO dirty FROM ss_windows w WHERE w.ano = p_ano AND w.needs_rebuild = 1;
    IF p_at IS NOT NULL AND version = p_version AND epoch = p_epoch AND p_recent = (
            SELECT coalesce(array_agg(w.wid || ':' || w.idx_xid ORDER BY w.wid), '{}') FROM ss_windows w
            WHERE w.ano = p_ano AND w.idx_xid >= p_at::xid8) THEN
        rows := p_rows; tokens := p_tokens; windows := p_windows; gen := p_gen; at := p_at; recent := p_recent;
        RETURN;
    END IF;
    SELECT coalesce(sum(w.idx_rows), 0), coalesce(sum(w.idx_tokens), 0), count(*), coalesce(sum(w.idx_gen), 0)
        INTO rows, tokens, windows, gen FROM ss_windows w WHERE w.ano = p_ano;
    at := pg_snapshot_xmin(pg_current_snapshot())::text;  -- the transaction's snapshot (REPEATABLE READ)
    SELECT coalesce(array_agg(w.wid || ':' || w.idx_xid ORDER BY w.wid), '{}') INTO recent FROM ss_windows w
        WHERE w.ano = p_ano AND w.idx_xid >= at::xid8;
END $$;
"""),
    (7, "pending_list_per_transaction", """
-- The pending list's limit comes from the writing transaction's gin_pending_list_limit, no longer
-- from the index: every write transaction sets it to 64 kB (db.py, BEGIN), as migration 4 did for
-- all; a reconciliation raises it for its bulk insert and moves the list into the tree itself at
-- the end of the insert (reconcile.py), where the 64 kB limit moved it every ~200 rows.
ALTER INDEX ss_index_tsv RESET (gin_pending_list_limit);
"""),
    (8, "meta_stamp_at_commit", """
-- A catalog change (a session or window made, changed or deleted) takes the agent's meta version
-- at COMMIT, no longer at the change: the stamping triggers are deferred constraint triggers, so
-- the agent row, which stays locked until the transaction ends (versions commit in order), is
-- held only through the commit. Stamped at the change, every append making a session held it
-- through all of its writes, and concurrent appends to new sessions ran one at a time. Each
-- trigger sets the row's meta_seq by key (an UPDATE that changes only meta_seq, which fires no
-- stamp again); a row's second change in one transaction finds it stamped already.
DROP TRIGGER ss_sessions_stamp ON ss_sessions;
DROP TRIGGER ss_sessions_gone ON ss_sessions;
DROP TRIGGER ss_windows_stamp_insert ON ss_windows;
DROP TRIGGER ss_windows_stamp_update ON ss_windows;
DROP TRIGGER ss_windows_gone ON ss_windows;
DROP FUNCTION ss_stamp_row();
-- The version moves once per transaction: a transaction's later stamps read it without writing
-- the agent row again (a SQL function planned its UPDATE at every call; PL/pgSQL keeps the plans).
CREATE OR REPLACE FUNCTION ss_meta_stamp(p_ano integer) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v bigint;
BEGIN
    UPDATE ss_agents SET meta_version = meta_version + 1, meta_txid = txid_current()
        WHERE ano = p_ano AND meta_txid IS DISTINCT FROM txid_current() RETURNING meta_version INTO v;
    IF NOT FOUND THEN  -- moved by this transaction already
        SELECT meta_version INTO v FROM ss_agents WHERE ano = p_ano;
    END IF;
    RETURN v;
END $$;
CREATE FUNCTION ss_stamp_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v bigint := ss_meta_stamp(NEW.ano);
BEGIN
    IF TG_TABLE_NAME = 'ss_sessions' THEN
        UPDATE ss_sessions SET meta_seq = v WHERE ano = NEW.ano AND session_key = NEW.session_key AND meta_seq <> v;
    ELSE
        UPDATE ss_windows SET meta_seq = v WHERE wid = NEW.wid AND meta_seq <> v;
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER ss_sessions_stamp_insert AFTER INSERT ON ss_sessions DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ss_stamp_at_commit();
CREATE CONSTRAINT TRIGGER ss_sessions_stamp_update AFTER UPDATE ON ss_sessions DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.meta_seq = NEW.meta_seq) EXECUTE FUNCTION ss_stamp_at_commit();
CREATE CONSTRAINT TRIGGER ss_sessions_gone AFTER DELETE ON ss_sessions DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ss_tombstone('session', 'session_key');
CREATE CONSTRAINT TRIGGER ss_windows_stamp_insert AFTER INSERT ON ss_windows DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ss_stamp_at_commit();
CREATE CONSTRAINT TRIGGER ss_windows_stamp_update AFTER UPDATE ON ss_windows DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.session_key, OLD.session_id, OLD.cold) IS DISTINCT FROM (NEW.session_key, NEW.session_id, NEW.cold))
    EXECUTE FUNCTION ss_stamp_at_commit();
CREATE CONSTRAINT TRIGGER ss_windows_gone AFTER DELETE ON ss_windows DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ss_tombstone('window', 'wid');
"""),
    (9, "search_stats", """
-- A search's head (ss_search_head) and each phrase's document count: the count the caller kept
-- (p_dfs) while the index state it was counted at (p_dv, p_dw, p_dg, p_de: version, windows,
-- gen, epoch) is the head's, else counted now. In the search statement each phrase's count was
-- planned with every search (~0.1 ms of two words' 0.6 ms of planning), whether it ran or not;
-- here it is planned only when it runs, for its values (EXECUTE: a plan cached for any agent and
-- word might walk the agent's rows by its b-tree rather than the word's by the GIN index).
CREATE FUNCTION ss_search_stats(p_ano integer, p_version bigint, p_epoch bigint, p_at text, p_recent text[],
    p_rows bigint, p_tokens bigint, p_windows bigint, p_gen numeric, p_qs text[], p_dfs bigint[],
    p_dv bigint[], p_dw bigint[], p_dg numeric[], p_de bigint[],
    OUT version bigint, OUT dirty bigint[], OUT rows bigint, OUT tokens bigint, OUT windows bigint,
    OUT gen numeric, OUT epoch bigint, OUT listing integer, OUT at text, OUT recent text[], OUT dfs bigint[])
LANGUAGE plpgsql STABLE AS $$
DECLARE
    df bigint;
BEGIN
    SELECT * INTO version, dirty, rows, tokens, windows, gen, epoch, listing, at, recent
        FROM ss_search_head(p_ano, p_version, p_epoch, p_at, p_recent, p_rows, p_tokens, p_windows, p_gen);
    dfs := '{}';
    FOR i IN 1 .. coalesce(array_length(p_qs, 1), 0) LOOP
        IF (version, windows, gen, epoch) = (p_dv[i], p_dw[i], p_dg[i], p_de[i]) THEN
            df := p_dfs[i];
        ELSE
            EXECUTE 'SELECT count(*) FROM ss_index WHERE ano = $1 AND tsv @@ $2::tsquery' INTO df USING p_ano, p_qs[i];
        END IF;
        dfs := dfs || df;
    END LOOP;
END $$;
"""),
    (10, "search_stats_from_postings", """
-- As ss_search_stats (migration 9), but a phrase whose cached count no longer holds and that the
-- agent's postings hold (p_keys[i]: 'w:' and the word, kept as kind 0 or 2; 'p:' and a 2-4 letter
-- prefix, kind 1) is counted as postings.py counts it: the build's rows holding it plus the rows
-- written since that hold it, while the build is usable (no row at or below its mark gone, at most
-- p_fresh_limit written since). Counted through the GIN index, a word in 10% of 1,000,000 rows
-- cost 200 ms, in every search after any write (a write moves the index state every count is
-- kept against): `recent` and several words. The migration 9 function stays for processes still
-- running the code before this one.
CREATE OR REPLACE FUNCTION ss_search_stats(p_ano integer, p_version bigint, p_epoch bigint, p_at text,
    p_recent text[], p_rows bigint, p_tokens bigint, p_windows bigint, p_gen numeric, p_qs text[], p_dfs bigint[],
    p_dv bigint[], p_dw bigint[], p_dg numeric[], p_de bigint[], p_keys text[], p_fresh_limit bigint,
    OUT version bigint, OUT dirty bigint[], OUT rows bigint, OUT tokens bigint, OUT windows bigint,
    OUT gen numeric, OUT epoch bigint, OUT listing integer, OUT at text, OUT recent text[], OUT dfs bigint[])
LANGUAGE plpgsql STABLE AS $$
DECLARE
    df bigint;
    docs bigint;
    b_mark bigint;
    b_old bigint;
    fresh bigint;
    usable boolean;  -- NULL until a phrase needs the build
BEGIN
    SELECT * INTO version, dirty, rows, tokens, windows, gen, epoch, listing, at, recent
        FROM ss_search_head(p_ano, p_version, p_epoch, p_at, p_recent, p_rows, p_tokens, p_windows, p_gen);
    dfs := '{}';
    FOR i IN 1 .. coalesce(array_length(p_qs, 1), 0) LOOP
        df := NULL;
        IF (version, windows, gen, epoch) = (p_dv[i], p_dw[i], p_dg[i], p_de[i]) THEN
            df := p_dfs[i];
        ELSIF p_keys[i] IS NOT NULL THEN
            -- a term the postings do not hold costs one key lookup more than before
            SELECT min(p.docs) INTO docs FROM ss_postings p WHERE p.ano = p_ano AND p.key = substr(p_keys[i], 3)
                AND p.kind = ANY (CASE WHEN left(p_keys[i], 2) = 'p:' THEN ARRAY[1] ELSE ARRAY[0, 2] END);
            IF docs IS NOT NULL AND usable IS NULL THEN
                SELECT b.mark, b.old_rows INTO b_mark, b_old FROM ss_postings_built b WHERE b.ano = p_ano;
                usable := b_mark IS NOT NULL;
                IF usable THEN
                    SELECT count(*) INTO fresh FROM ss_index f WHERE f.ano = p_ano AND f.iseq > b_mark;
                    usable := rows - fresh = b_old AND fresh <= p_fresh_limit;
                END IF;
            END IF;
            IF docs IS NOT NULL AND usable THEN
                EXECUTE 'SELECT count(*) FROM ss_index WHERE ano = $1 AND iseq > $2 AND tsv @@ $3::tsquery'
                    INTO df USING p_ano, b_mark, p_qs[i];
                df := df + docs;
            END IF;
        END IF;
        IF df IS NULL THEN
            EXECUTE 'SELECT count(*) FROM ss_index WHERE ano = $1 AND tsv @@ $2::tsquery' INTO df USING p_ano, p_qs[i];
        END IF;
        dfs := dfs || df;
    END LOOP;
END $$;
"""),
    (11, "unicode61_tokens", """
-- Index rows hold SQLite's unicode61 tokens for every script (text/unicode61.py); rows of text that
-- is not ASCII were made by an earlier tokenizer (Indic marks kept, full case folding). They are
-- dropped, their windows' counters moved and the windows handed to reconciliation, which indexes
-- them again: searches leave those windows out and answer `indexing: true` meanwhile. ASCII text
-- tokenizes as it did: its rows stay.
CREATE TEMP TABLE ss_retoken ON COMMIT DROP AS
    SELECT i.id, i.wid, i.dl FROM ss_index i JOIN ss_events e ON e.id = i.id
    WHERE octet_length(e.text) <> length(e.text);
UPDATE ss_windows w SET needs_rebuild = 1, rebuild_gen = rebuild_gen + 1, idx_rows = idx_rows - c.n,
    idx_tokens = idx_tokens - c.t
    FROM (SELECT wid, count(*) AS n, sum(dl) AS t FROM ss_retoken GROUP BY wid) c WHERE w.wid = c.wid;
DELETE FROM ss_index WHERE id IN (SELECT id FROM ss_retoken);
"""),
    (12, "meaning_index", """
-- The meaning index (SPEC §3), as on SQLite (store/sqlite/schema.py, 15): an int8 embedding with a
-- per-row scale per index row, keyed by its id, in bytea (no pgvector needed). needs_embed marks
-- windows with index rows lacking an embedding of the agent's current model (ss_agents.embed_model),
-- under an embed claim apart from reconciliation's. ss_agents.embed_seq is moved by every
-- transaction storing or deleting embeddings, the agent's row then locked to its end, so those
-- transactions commit in the order of their numbers and a search process reading what came after
-- the number it holds misses none (search/vectors.py).
ALTER TABLE ss_windows ADD COLUMN needs_embed integer NOT NULL DEFAULT 0,
    ADD COLUMN embed_token text, ADD COLUMN embed_expires_at double precision;
CREATE INDEX ss_windows_embed ON ss_windows (ano, wid) WHERE needs_embed = 1;
UPDATE ss_windows SET needs_embed = 1 WHERE cold = 0 AND messages > 0;
ALTER TABLE ss_agents ADD COLUMN embed_model integer NOT NULL DEFAULT 0,
    ADD COLUMN embed_seq bigint NOT NULL DEFAULT 0;
CREATE TABLE ss_embed_models (mno serial PRIMARY KEY, model text NOT NULL UNIQUE, dims integer NOT NULL);
CREATE TABLE ss_embeddings (
    id bigint PRIMARY KEY,
    ano integer NOT NULL,
    mno integer NOT NULL,
    eseq bigint NOT NULL,
    ts bigint NOT NULL,
    scale real NOT NULL,
    vec bytea NOT NULL
);
CREATE INDEX ss_embeddings_by_eseq ON ss_embeddings (ano, eseq);
CREATE TABLE ss_embed_gone (ano integer NOT NULL, gseq bigint NOT NULL, id bigint NOT NULL);
CREATE INDEX ss_embed_gone_by_seq ON ss_embed_gone (ano, gseq);
CREATE FUNCTION ss_embed_gone() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    a integer;
    s bigint;
BEGIN
    FOR a IN SELECT DISTINCT ano FROM gone LOOP
        UPDATE ss_agents SET embed_seq = embed_seq + 1 WHERE ano = a RETURNING embed_seq INTO s;
        INSERT INTO ss_embed_gone (ano, gseq, id) SELECT ano, s, id FROM gone WHERE ano = a;
    END LOOP;
    RETURN NULL;
END $$;
CREATE TRIGGER ss_embeddings_gone AFTER DELETE ON ss_embeddings REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION ss_embed_gone();
"""),
    (13, "score_bounds", """
-- An agent's score bounds (bounds.py): per lexeme its highest count in one index row and the
-- length of its shortest row holding it, as of the index state recorded beside them (the state
-- a cached df is checked by: meta version, windows, summed idx_gen, idx_epoch). The lexemes sort
-- by code point (COLLATE "C"), so a prefix's lexemes are one range of the key.
CREATE TABLE ss_term_bounds (
    ano integer NOT NULL,
    term text COLLATE "C" NOT NULL,
    max_tf integer NOT NULL,
    min_dl integer NOT NULL,
    PRIMARY KEY (ano, term)
);
CREATE TABLE ss_bounds_built (
    ano integer PRIMARY KEY,
    version bigint NOT NULL,
    windows bigint NOT NULL,
    gen numeric NOT NULL,
    epoch bigint NOT NULL,
    folded_at double precision NOT NULL,
    fold_s double precision NOT NULL
);
"""),
    (14, "bounds_kept_by_writes", """
-- The writes keep each agent's score bounds (bounds.py): every statement inserting index rows adds
-- a row for each lexeme whose bounds it moves (a higher count, a shorter row); a lexeme's bounds
-- are the highest max_tf and least min_dl of its rows. Rows are only added, never updated (one per
-- lexeme and agent would make appends of the same agent wait on each other's open transaction),
-- and a fold replaces them all. A deletion leaves them as they were, still bounds of the rows
-- left, so bounds marked `kept` hold in every index state, and an agent created from now on has
-- them kept from its first row. A fold takes the agent's lock (bounds.LOCK, 0x626F756E) alone and
-- the upkeep shares it: a fold reads every row whose upkeep it replaces.
ALTER TABLE ss_term_bounds DROP CONSTRAINT ss_term_bounds_pkey;
CREATE INDEX ss_term_bounds_by_term ON ss_term_bounds (ano, term);
ALTER TABLE ss_bounds_built ADD COLUMN kept boolean NOT NULL DEFAULT false;
CREATE FUNCTION ss_bounds_keep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1651471726, a.ano) FROM (SELECT DISTINCT ano FROM added ORDER BY ano) a;
    INSERT INTO ss_term_bounds (ano, term, max_tf, min_dl)
    SELECT n.ano, n.term, n.max_tf, n.min_dl FROM (SELECT c.ano, e.key AS term, max(e.value::integer) AS max_tf,
        min(c.dl) AS min_dl FROM added c, jsonb_each_text(c.tf) e GROUP BY c.ano, e.key) n
    WHERE NOT EXISTS (SELECT 1 FROM ss_term_bounds o WHERE o.ano = n.ano AND o.term = n.term
                      AND o.max_tf >= n.max_tf AND o.min_dl <= n.min_dl);
    RETURN NULL;
END $$;
CREATE TRIGGER ss_index_bounds AFTER INSERT ON ss_index REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION ss_bounds_keep();
CREATE FUNCTION ss_bounds_of_new_agent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ss_bounds_built (ano, version, windows, gen, epoch, folded_at, fold_s, kept)
        VALUES (NEW.ano, 0, 0, 0, 0, 0, 0, true);
    RETURN NULL;
END $$;
CREATE TRIGGER ss_agents_bounds AFTER INSERT ON ss_agents FOR EACH ROW EXECUTE FUNCTION ss_bounds_of_new_agent();
"""),
    (15, "packed_embeddings", """
-- The embeddings folded into blocks (store/packed.py), per agent: a cold search process reads these
-- few large rows, then ss_embeddings after the fold's counter. gen counts an agent's folds, so a
-- fold built meanwhile by another process is not overwritten by an older one. The blocks are
-- stored out of line uncompressed (int8 vectors do not compress; pglz would only cost the read).
CREATE TABLE ss_vec_folds (
    ano integer PRIMARY KEY,
    gen bigint NOT NULL,
    mno integer NOT NULL,
    embed_seq bigint NOT NULL,
    rows bigint NOT NULL
);
CREATE TABLE ss_vec_blocks (
    ano integer NOT NULL,
    bno integer NOT NULL,
    n integer NOT NULL,
    rids bytea NOT NULL,
    ts bytea NOT NULL,
    scales bytea NOT NULL,
    vecs bytea NOT NULL,
    PRIMARY KEY (ano, bno)
);
ALTER TABLE ss_vec_blocks ALTER COLUMN rids SET STORAGE EXTERNAL, ALTER COLUMN ts SET STORAGE EXTERNAL,
    ALTER COLUMN scales SET STORAGE EXTERNAL, ALTER COLUMN vecs SET STORAGE EXTERNAL;
"""),
    (16, "sessions_spawned_by", """
-- the session list's spawnedBy filter follows the spawn tree by a recursive CTE (roster.py): each
-- step looks up the sessions a key spawned, across agents
CREATE INDEX ss_sessions_spawned_by ON ss_sessions (spawned_by) WHERE spawned_by IS NOT NULL;
"""),
    (17, "embed_claims", """
-- An embed job's claim on a window, apart from the window's row: the writers lock that row
-- (ss_window_for_write), and a claim or lease renewal made there held it to the end of the embed
-- job's transaction, through its scans for pending rows, so appends and rewinds waited on a job
-- running at the workers' idle priority. ss_windows.embed_token/embed_expires_at are left unused.
CREATE TABLE ss_embed_claims (
    wid bigint PRIMARY KEY,
    token text NOT NULL,
    expires_at double precision NOT NULL
);
"""),
)
