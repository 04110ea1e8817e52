"""The meaning index on SQLite: embeddings beside the word index (migrations.py, 15).

Writes are primitives of the writer's reconciliation transaction (store.base.EmbedTx), for
indexer/embedding.py; reads answer search/meaning.py on a reader connection.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from .. import packed
from ..base import EmbedClaim, Embedded, EmbeddingChanges, MeaningHead, PendingRow, RowHit
from ..rowids import LOW_SEQS, MAX_SEQ, id_sql, window_ranges
from .fetch import fetch_all

if TYPE_CHECKING:
    import aiosqlite

    from ..packed import Packed
    from .writer import SqliteWriter

# the word-index rows of one id range lacking an embedding of a model
_PENDING = ("SELECT f.rowid FROM msg_fts f WHERE f.rowid BETWEEN :lo AND :hi AND NOT EXISTS "
            "(SELECT 1 FROM embeddings m WHERE m.rid = f.rowid AND m.mno = :mno)")


def embeddable(w: str) -> str:
    """SQL: whether window `w` (a table name or alias of `windows`) is one an embed job may take:
    warm (a cold window's rows left the word index) and not of an incognito session (whose text
    goes to no embedder). `needs_embed` is kept on the others, so that a session made ordinary
    again waits at once; only these count as waiting (index.status, metrics, the sweep)."""
    return (f"{w}.cold = 0 AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = {w}.session_key "
            "AND s.incognito = 1)")


# the id ranges of the warm windows of incognito sessions (rowids.window_ranges, in SQL); CROSS
# JOIN keeps these few ranges the outer loop, each a rowid range FTS5 seeks to, not a scan of it
_SECRET = (f"secret_w(wid) AS (SELECT w.wid FROM sessions s CROSS JOIN windows w ON w.session_key = s.session_key "
           f"WHERE s.incognito = 1 AND w.cold = 0), "
           f"secret(lo, hi) AS (SELECT {id_sql('wid', '0')}, {id_sql('wid', str(LOW_SEQS - 1))} | 1 FROM secret_w "
           f"UNION ALL SELECT {id_sql('wid', str(LOW_SEQS))}, {id_sql('wid', str(MAX_SEQ))} | 1 FROM secret_w)")


class SqliteEmbedTx:
    """EmbedTx on the writer's connection `c`, with the transaction's clock `now` (epoch s)."""

    c: sqlite3.Connection
    now: float

    async def embed_model(self, model: str, dimensions: int) -> int:
        row = self.c.execute("SELECT mno FROM embed_models WHERE model = ?", (model,)).fetchone()
        mno = row[0] if row else self.c.execute(
            "INSERT INTO embed_models (model, dims) VALUES (?, ?) RETURNING mno", (model, dimensions)).fetchone()[0]
        current = self.c.execute("SELECT value FROM meta WHERE key = 'embed_model'").fetchone()[0]
        if current != mno:
            self.c.execute("UPDATE meta SET value = ? WHERE key = 'embed_model'", (mno,))
            self.c.execute("UPDATE windows SET needs_embed = 1 WHERE cold = 0 AND messages > 0")
        return cast(int, mno)

    async def embed_claim(self, wid: int, token: str, lease_s: float) -> EmbedClaim:
        row = self.c.execute(
            "UPDATE windows SET embed_token = ?, embed_expires_at = ? WHERE wid = ? "
            f"AND (embed_token IS NULL OR embed_expires_at < ?) AND {embeddable('windows')} RETURNING 1",
            (token, self.now + lease_s, wid, self.now)).fetchone()
        if row is not None:
            return EmbedClaim.CLAIMED
        state = self.c.execute("SELECT w.cold, coalesce(s.incognito, 0) FROM windows w LEFT JOIN sessions s "
                               "ON s.session_key = w.session_key WHERE w.wid = ?", (wid,)).fetchone()
        return EmbedClaim.refused(state)

    async def embed_waiting(self, wid: int, *, limit: int) -> list[int]:
        out: list[int] = []
        for cmp, order in ((">", ""), ("<", " DESC")):
            out += [r[0] for r in self.c.execute(
                f"SELECT wid FROM windows w WHERE needs_embed = 1 AND wid {cmp} ? AND {embeddable('w')} "
                f"AND (embed_token IS NULL OR embed_expires_at < ?) ORDER BY wid{order} LIMIT ?",
                (wid, self.now, limit - len(out)))]
        return out

    async def embed_pending(self, wid: int, model_no: int, *, after: int, limit: int) -> list[PendingRow]:
        out: list[PendingRow] = []
        for lo, hi in window_ranges(wid):
            if hi <= after or len(out) >= limit:
                continue
            rows = self.c.execute(
                f"SELECT e.id, e.ts, e.text FROM events e WHERE e.id IN ({_PENDING} ORDER BY f.rowid LIMIT :n) "
                "ORDER BY e.id", {"lo": max(lo, after + 1), "hi": hi, "mno": model_no, "n": limit - len(out)}
            ).fetchall()
            out += [PendingRow(rid, ts, text) for rid, ts, text in rows if text is not None]
        return out

    def _holds(self, wid: int, token: str, lease_s: float) -> bool:
        return self.c.execute("UPDATE windows SET embed_expires_at = ? WHERE wid = ? AND embed_token = ? "
                              "RETURNING 1", (self.now + lease_s, wid, token)).fetchone() is not None

    async def store_embeddings(self, wid: int, token: str, lease_s: float, model_no: int,
                               rows: list[Embedded]) -> bool:
        if not self._holds(wid, token, lease_s):
            return False
        if rows:
            (seq,), = self.c.execute("UPDATE meta SET value = value + 1 WHERE key = 'embed_seq' RETURNING value")
            # a row that left the word index meanwhile (a rewind reconciled) is not stored: its
            # window's next pass makes it again if it comes back
            self.c.executemany(
                "INSERT OR REPLACE INTO embeddings (rid, mno, eseq, ts, scale, vec) SELECT ?, ?, ?, ?, ?, ? "
                "WHERE EXISTS (SELECT 1 FROM msg_fts WHERE rowid = ?)",
                [(r.rid, model_no, seq, r.ts, r.scale, r.vec, r.rid) for r in rows])
        return True

    async def finish_embed(self, wid: int, token: str, model_no: int) -> bool:
        for lo, hi in window_ranges(wid):
            if self.c.execute(f"{_PENDING} LIMIT 1", {"lo": lo, "hi": hi, "mno": model_no}).fetchone():
                return False
        self.c.execute("UPDATE windows SET needs_embed = 0, embed_token = NULL, embed_expires_at = NULL "
                       "WHERE wid = ? AND embed_token = ?", (wid, token))
        return True

    async def drop_embed_claim(self, wid: int, token: str) -> None:
        self.c.execute("UPDATE windows SET embed_token = NULL, embed_expires_at = NULL "
                       "WHERE wid = ? AND embed_token = ?", (wid, token))


# -- reads ----------------------------------------------------------------------------------------


async def meaning_head(conn: aiosqlite.Connection, model: str) -> MeaningHead:
    rows = await fetch_all(conn,
        "SELECT (SELECT value FROM meta WHERE key = 'meta_version'), "
        "(SELECT mno FROM embed_models WHERE model = :model), "
        "(SELECT value FROM meta WHERE key = 'embed_model'), (SELECT value FROM meta WHERE key = 'embed_seq'), "
        "(SELECT coalesce(max(gseq), 0) FROM embed_gone), "
        "(SELECT json_group_array(wid) FROM windows WHERE needs_rebuild = 1), "
        f"(SELECT json_group_array(wid) FROM windows w WHERE needs_embed = 1 AND {embeddable('w')})",
        {"model": model})
    r = rows[0]
    return MeaningHead(r[0], r[1], r[2], r[3], r[4], frozenset(json.loads(r[5])), frozenset(json.loads(r[6])))


async def embedding_changes(conn: aiosqlite.Connection, model_no: int, embed_seq: int, gone_seq: int
                            ) -> EmbeddingChanges:
    await conn.execute("BEGIN")  # one snapshot for the rows and the deletions
    try:
        return await _changes(conn, model_no, embed_seq, gone_seq)
    finally:
        await conn.execute("COMMIT")


async def _changes(conn: aiosqlite.Connection, model_no: int, embed_seq: int, gone_seq: int) -> EmbeddingChanges:
    rows = await fetch_all(conn, "SELECT rid, mno, eseq, ts, scale, vec FROM embeddings WHERE eseq > ?", (embed_seq,))
    gone = await fetch_all(conn, "SELECT gseq, rid FROM embed_gone WHERE gseq > ? ORDER BY gseq", (gone_seq,))
    mine = [Embedded(r[0], r[3], r[4], r[5]) for r in rows if r[1] == model_no]
    other = [r[0] for r in rows if r[1] != model_no]
    return EmbeddingChanges(mine, other, [g[1] for g in gone], max((r[2] for r in rows), default=embed_seq),
                            gone[-1][0] if gone else gone_seq)


async def indexed_rows(conn: aiosqlite.Connection, rids: list[int]) -> list[RowHit]:
    rows = await fetch_all(conn,
        "SELECT e.id, e.event_id, e.ts, e.text FROM json_each(:ids) j JOIN events e ON e.id = j.value "
        "WHERE e.text IS NOT NULL AND EXISTS (SELECT 1 FROM msg_fts f WHERE f.rowid = e.id)",
        {"ids": json.dumps(rids)})
    return [RowHit(rid, 0.0, mid, ts, text) for rid, mid, ts, text in rows]


async def embed_status(conn: aiosqlite.Connection, model: str) -> dict[str, int]:
    """The word-index rows of embeddable windows with an embedding of `model`, and without: an
    incognito session's rows are neither (they are never embedded, so never waiting). One
    statement, one snapshot: what is taken off never counts rows the totals did not."""
    rows = await fetch_all(conn,
        f"WITH {_SECRET}, model(mno) AS (SELECT mno FROM embed_models WHERE model = :model) "
        "SELECT (SELECT count(*) FROM msg_fts), "
        "(SELECT count(*) FROM embeddings m JOIN msg_fts f ON f.rowid = m.rid WHERE m.mno = (SELECT mno FROM model)), "
        "(SELECT count(*) FROM secret CROSS JOIN msg_fts f ON f.rowid BETWEEN secret.lo AND secret.hi), "
        "(SELECT count(*) FROM secret CROSS JOIN embeddings m ON m.rid BETWEEN secret.lo AND secret.hi "
        # `+`: the rid ranges lead, not an index built on mno for this one statement
        "CROSS JOIN msg_fts f ON f.rowid = m.rid WHERE +m.mno = (SELECT mno FROM model))", {"model": model})
    total, embedded, secret, secret_embedded = rows[0]
    embedded -= secret_embedded  # a session made incognito after it was embedded
    return {"embeddedMessages": embedded, "embeddingBacklog": total - secret - embedded}


# -- packed blocks (store/packed.py) ----------------------------------------------------------------

async def load_embeddings(conn: aiosqlite.Connection, model_no: int, dims: int) -> tuple[Packed, EmbeddingChanges]:
    """The embeddings of `model_no` as folded (none when the fold is of another model, or there is
    none), and the changes after the fold's counters, in one snapshot."""
    await conn.execute("BEGIN")
    try:
        fold = await fetch_all(conn, "SELECT mno, embed_seq, gone_seq, rows, stage FROM vec_fold")
        if not fold or fold[0][0] != model_no:
            return packed.empty(model_no, dims), await _changes(conn, model_no, 0, 0)
        _, embed_seq, gone_seq, rows, stage = fold[0]
        out = packed.Unpacker(model_no, embed_seq, gone_seq, dims, rows)
        async with conn.execute("SELECT n, rids, ts, scales, vecs FROM vec_blocks WHERE stage = ? ORDER BY bno",
                                (stage,)) as cur:
            # a few blocks decoded here while aiosqlite's thread reads the next few
            ahead = asyncio.ensure_future(cur.fetchmany(8))
            while blocks := list(await ahead):
                ahead = asyncio.ensure_future(cur.fetchmany(8))
                for block in blocks:
                    out.add(cast(packed.Block, block))
        return out.done(), await _changes(conn, model_no, embed_seq, gone_seq)
    finally:
        await conn.execute("COMMIT")


async def fold_state(conn: aiosqlite.Connection) -> tuple[int, int, int, int, int]:
    """(the fold's generation, rows, rows stored after it, the current model and its dimensions);
    (0, 0, all, ...) with none."""
    fold = await fetch_all(conn, "SELECT gen, rows, embed_seq FROM vec_fold")
    gen, rows, seq = fold[0] if fold else (0, 0, -1)
    ((since,),) = await fetch_all(conn, "SELECT count(*) FROM embeddings WHERE eseq > ?", (seq,))
    model = await fetch_all(conn, "SELECT m.mno, m.dims FROM meta JOIN embed_models m ON m.mno = meta.value "
                                  "WHERE meta.key = 'embed_model'")
    mno, dims = model[0] if model else (0, 0)
    return gen, rows, since, mno, dims


STAGE_BLOCKS = 16  # blocks written (or let go) a transaction: 16 MiB of 256-dimension vectors


def stage_blocks(c: sqlite3.Connection, stage: int, blocks: list[tuple[int, packed.Block]]) -> None:
    """Write some of a fold's blocks under its `stage` (no search reads them before it is kept)."""
    c.executemany("INSERT INTO vec_blocks (stage, bno, n, rids, ts, scales, vecs) VALUES (?, ?, ?, ?, ?, ?, ?)",
                  [(stage, bno, *block) for bno, block in blocks])


def keep_fold(c: sqlite3.Connection, gen: int, stage: int, folded: Packed) -> int | None:
    """Make the blocks of `stage` the fold `gen` + 1, unless another fold came after `gen` (None);
    the stage of the fold before (0: none), whose blocks are to be let go."""
    now = c.execute("SELECT gen, stage FROM vec_fold").fetchone()
    if (now[0] if now else 0) != gen:
        return None
    c.execute("INSERT OR REPLACE INTO vec_fold (id, gen, stage, mno, embed_seq, gone_seq, rows) "
              "VALUES (1, ?, ?, ?, ?, ?, ?)",
              (gen + 1, stage, folded.model_no, folded.embed_seq, folded.gone_seq, len(folded)))
    return int(now[1]) if now else 0


def drop_blocks(c: sqlite3.Connection, stage: int, *, older_than: int | None = None) -> int:
    """Let go of up to STAGE_BLOCKS blocks of `stage` (a fold replaced, or one that lost its race),
    or with `older_than`, of stages begun before it and never kept (a fold cut short; a fold still
    writing is younger); how many."""
    if older_than is None:
        sql, args = "b.stage = ?", (stage,)
    else:
        sql, args = "b.stage < ? AND b.stage IS NOT (SELECT stage FROM vec_fold)", (older_than,)
    return c.execute(f"DELETE FROM vec_blocks WHERE id IN (SELECT b.id FROM vec_blocks b WHERE {sql} LIMIT ?)",
                     (*args, STAGE_BLOCKS)).rowcount


def new_stage(now: float) -> int:
    """A fold's stage: its start time (seconds) above 20 random bits, so that a stage left by a fold
    cut short is known by its age."""
    return (int(now) << 20) | secrets.randbits(20)


STAGE_ORPHAN_S = 3600  # a stage never kept this long after it began is a fold cut short


async def fold_vectors(reading: Callable[[], AbstractAsyncContextManager[Any]],
                       run: Callable[[Callable[[SqliteWriter], Any]], Awaitable[Any]]) -> dict[str, Any] | None:
    """Fold an agent's embeddings into blocks (store/packed.py), if a fold is due: read on a reader
    connection (`reading`), then written a few blocks a transaction on the writer (`run`), so
    appends wait for one of those at most, and kept in one short transaction if no other fold came
    meanwhile; the blocks of no kept fold are let go the same way after."""
    started = time.monotonic()
    async with reading() as r:
        gen, rows, since, mno, dims = await fold_state(r.conn)
        if not mno or not packed.fold_due(rows, since):
            return None
        held, changes = await load_embeddings(r.conn, mno, dims)
    folded = await asyncio.to_thread(packed.with_changes, held, changes, dims)
    stage = new_stage(time.time())
    blocks = list(enumerate(packed.to_blocks(folded)))

    def write(w: SqliteWriter, some: list[tuple[int, packed.Block]]) -> None:
        with w.tx() as c:
            stage_blocks(c, stage, some)

    def keep(w: SqliteWriter) -> int | None:
        with w.tx() as c:
            return keep_fold(c, gen, stage, folded)

    def drop(w: SqliteWriter, which: int, older_than: int | None = None) -> int:
        with w.tx() as c:
            return drop_blocks(c, which, older_than=older_than)

    for at in range(0, len(blocks), STAGE_BLOCKS):
        await run(partial(write, some=blocks[at:at + STAGE_BLOCKS]))
    before = await run(keep)
    while await run(partial(drop, which=stage if before is None else before)):
        pass
    orphans_before = int(time.time() - STAGE_ORPHAN_S) << 20  # stages begun before then
    while await run(partial(drop, which=0, older_than=orphans_before)):
        pass
    if before is None:
        return None
    return {"rows": len(folded), "since": since, "seconds": round(time.monotonic() - started, 3)}
