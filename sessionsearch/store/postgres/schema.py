"""Numbered migrations of the PostgreSQL store, recorded in `ss_schema_migrations` and applied
once, under an advisory lock, however many processes start at the same time.

Every agent lives in the same tables, keyed by its number (`ano`). Window ids come from one
sequence, so a row id (rowids.py) is unique across agents too.
"""

from __future__ import annotations

import psycopg

# the advisory lock key every migrating process takes (any fixed bigint; "sessions" in ASCII)
LOCK_KEY = 0x73657373696F6E73

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
    (4, "postings", """
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
)

LATEST = MIGRATIONS[-1][0]


async def applied_version(conn: psycopg.AsyncConnection) -> int:
    """The highest migration recorded in the database; 0 for a database never migrated."""
    cur = await conn.execute("SELECT to_regclass('ss_schema_migrations') IS NOT NULL")
    if not (await cur.fetchone())[0]:
        return 0
    cur = await conn.execute("SELECT coalesce(max(version), 0) FROM ss_schema_migrations")
    return (await cur.fetchone())[0]


async def migrate_connection(conn: psycopg.AsyncConnection) -> tuple[int, int]:
    """Apply the migrations not yet recorded, all in one transaction under a transaction-level
    advisory lock (which, unlike a session lock, holds behind PgBouncer's transaction pooling):
    a second process waits, then finds them recorded. (version before, version after)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        await conn.execute("CREATE TABLE IF NOT EXISTS ss_schema_migrations (version integer PRIMARY KEY, "
                           "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        before = await applied_version(conn)
        for version, name, script in MIGRATIONS:
            if version <= before:
                continue
            await conn.execute(script)  # several statements: no parameters
            await conn.execute("INSERT INTO ss_schema_migrations (version, name) VALUES (%s, %s)", (version, name))
        return before, await applied_version(conn)


async def migrate(url: str) -> tuple[int, int]:
    """Bring the database at `url` to the latest schema: (version before, version after)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=None) as conn:
        return await migrate_connection(conn)


async def schema_version(url: str) -> int:
    """The schema version the database at `url` is at (0: never migrated)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=None) as conn:
        return await applied_version(conn)
