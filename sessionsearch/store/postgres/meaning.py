"""The meaning index on PostgreSQL: embeddings beside the index rows (migrations.py, 12).

Writes are primitives of a reconciliation transaction (store.base.EmbedTx) for
indexer/embedding.py; reads answer search/meaning.py through a reader's snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg

from .. import packed
from ..base import EmbedClaim, Embedded, EmbeddingChanges, MeaningHead, PendingRow, RowHit
from ..packed import Packed
from ..rowids import LOW_SEQS, MAX_SEQ, id_sql, window_ranges
from .db import Reader, all_rows, one

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from psycopg import AsyncConnection

CLAIM_LOCK = 0x656D6264  # advisory lock key space ("embd") of embed claims, with the window (31 bits)

# index rows of one id range lacking an embedding of a model
_PENDING = ("SELECT i.id FROM ss_index i WHERE i.id BETWEEN %(lo)s AND %(hi)s AND NOT EXISTS "
            "(SELECT 1 FROM ss_embeddings m WHERE m.id = i.id AND m.mno = %(mno)s)")


def embeddable(w: str) -> str:
    """SQL: whether window `w` (a table name or alias of `ss_windows`) is one an embed job may
    take: warm (a cold window's rows left the index) and not of an incognito session (whose text
    goes to no embedder). `needs_embed` is kept on the others, so that a session made ordinary
    again waits at once; only these count as waiting (index.status, metrics, the sweep)."""
    return (f"{w}.cold = 0 AND NOT EXISTS (SELECT 1 FROM ss_sessions s WHERE s.ano = {w}.ano "
            f"AND s.session_key = {w}.session_key AND s.incognito = 1)")


class PgEmbedTx:
    """EmbedTx inside a transaction on `conn`, for agent `ano`, against the database's clock."""

    conn: AsyncConnection
    ano: int
    now: Callable[[], Awaitable[float]]  # the transaction's clock (epoch s), PgReconcileTx's
    _finished: list[tuple[int, str]]  # windows found with nothing pending, and their row's xmin then

    async def _derived(self) -> None:
        """Commit without waiting for the WAL flush: embeddings are derived data, and a crash that
        loses the last few such commits loses them whole (needs_embed with them), in order; their
        windows are embedded again. Each job's transactions otherwise wait a disk flush apiece."""
        await self.conn.execute("SET LOCAL synchronous_commit = off")

    async def embed_model(self, model: str, dimensions: int) -> int:
        await self._derived()
        await self.conn.execute("INSERT INTO ss_embed_models (model, dims) VALUES (%s, %s) ON CONFLICT (model) "
                                "DO NOTHING", (model, dimensions))
        row = await one(self.conn, "SELECT mno FROM ss_embed_models WHERE model = %s", (model,))
        assert row is not None  # inserted above, or there already
        mno: int = row[0]
        # the row lock serializes model changes with each other and with storing
        current = await one(self.conn, "SELECT embed_model FROM ss_agents WHERE ano = %s", (self.ano,))
        if current is not None and current[0] != mno:
            await self.conn.execute("UPDATE ss_agents SET embed_model = %s WHERE ano = %s", (mno, self.ano))
            await self.conn.execute("UPDATE ss_windows SET needs_embed = 1 WHERE ano = %s AND cold = 0 "
                                    "AND messages > 0", (self.ano,))
        return mno

    async def embed_claim(self, wid: int, token: str, lease_s: float) -> EmbedClaim:
        now = await self.now()
        # another job's transaction claiming this window holds the lock to its end: busy, not a wait;
        # a live claim is read without a lock (ON CONFLICT DO UPDATE would lock its row, the holder's
        # renewal then waiting on this transaction), an expired one taken by an UPDATE of it
        free = await one(self.conn, "SELECT pg_try_advisory_xact_lock(%s, %s::integer)", (CLAIM_LOCK, wid & 0x7FFFFFFF))
        held = await one(self.conn, "SELECT expires_at FROM ss_embed_claims WHERE wid = %s", (wid,))
        args = {"token": token, "until": now + lease_s, "wid": wid, "ano": self.ano, "now": now}
        window = f"SELECT 1 FROM ss_windows w WHERE w.wid = %(wid)s AND w.ano = %(ano)s AND {embeddable('w')}"
        if free is not None and free[0] and (held is None or held[0] < now) and await one(
                self.conn, f"INSERT INTO ss_embed_claims (wid, token, expires_at) SELECT %(wid)s, %(token)s, %(until)s "
                           f"WHERE EXISTS ({window}) ON CONFLICT (wid) DO NOTHING RETURNING 1" if held is None else
                           "UPDATE ss_embed_claims SET token = %(token)s, expires_at = %(until)s WHERE wid = %(wid)s "
                           f"AND expires_at < %(now)s AND EXISTS ({window}) RETURNING 1", args) is not None:
            return EmbedClaim.CLAIMED
        state = await one(self.conn, "SELECT w.cold, coalesce(s.incognito, 0) FROM ss_windows w "
                                     "LEFT JOIN ss_sessions s ON s.ano = w.ano AND s.session_key = w.session_key "
                                     "WHERE w.wid = %s AND w.ano = %s", (wid, self.ano))
        return EmbedClaim.refused(state)

    async def embed_waiting(self, wid: int, *, limit: int) -> list[int]:
        now = await self.now()
        out: list[int] = []
        for cmp, order in ((">", "ASC"), ("<", "DESC")):
            out += [r[0] for r in await all_rows(
                self.conn, "SELECT w.wid FROM ss_windows w LEFT JOIN ss_embed_claims c ON c.wid = w.wid "
                           f"WHERE w.ano = %s AND w.needs_embed = 1 AND w.wid {cmp} %s AND {embeddable('w')} "
                           f"AND (c.wid IS NULL OR c.expires_at < %s) ORDER BY w.wid {order} LIMIT %s",
                (self.ano, wid, now, limit - len(out)))]
        return out

    async def embed_pending(self, wid: int, model_no: int, *, after: int, limit: int) -> list[PendingRow]:
        out: list[PendingRow] = []
        for lo, hi in window_ranges(wid):
            if hi <= after or len(out) >= limit:
                continue
            rows = await all_rows(
                self.conn, f"SELECT e.id, e.ts, e.text FROM ss_events e WHERE e.id IN ({_PENDING} "
                           "ORDER BY i.id LIMIT %(n)s) ORDER BY e.id",
                {"lo": max(lo, after + 1), "hi": hi, "mno": model_no, "n": limit - len(out)})
            out += [PendingRow(rid, ts, text) for rid, ts, text in rows if text is not None]
        return out

    async def store_embeddings(self, wid: int, token: str, lease_s: float, model_no: int,
                               rows: list[Embedded]) -> bool:
        await self._derived()
        if await one(self.conn, "UPDATE ss_embed_claims SET expires_at = %s WHERE wid = %s AND token = %s "
                                "RETURNING 1", (await self.now() + lease_s, wid, token)) is None:
            return False
        if rows:
            (seq,) = await one(self.conn, "UPDATE ss_agents SET embed_seq = embed_seq + 1 WHERE ano = %s "
                                          "RETURNING embed_seq", (self.ano,)) or (0,)
            # a row that left the index meanwhile (a rewind reconciled) is not stored
            await self.conn.execute(
                "INSERT INTO ss_embeddings (id, ano, mno, eseq, ts, scale, vec) "
                "SELECT u.id, %s, %s, %s, u.ts, u.scale, u.vec FROM unnest(%s::bigint[], %s::bigint[], "
                "%s::real[], %s::bytea[]) AS u(id, ts, scale, vec) WHERE EXISTS (SELECT 1 FROM ss_index i "
                "WHERE i.id = u.id) ON CONFLICT (id) DO UPDATE SET mno = EXCLUDED.mno, eseq = EXCLUDED.eseq, "
                "ts = EXCLUDED.ts, scale = EXCLUDED.scale, vec = EXCLUDED.vec",
                (self.ano, model_no, seq, [r.rid for r in rows], [r.ts for r in rows], [r.scale for r in rows],
                 [r.vec for r in rows]))
        return True

    async def finish_embed(self, wid: int, token: str, model_no: int) -> bool:
        # the window's row version before the scan: a write that adds rows to the window updates it
        seen = await one(self.conn, "SELECT xmin::text FROM ss_windows WHERE wid = %s", (wid,))
        for lo, hi in window_ranges(wid):
            if await one(self.conn, f"{_PENDING} LIMIT 1", {"lo": lo, "hi": hi, "mno": model_no}) is not None:
                return False
        await self.drop_embed_claim(wid, token)
        if seen is not None:
            self._finished.append((wid, seen[0]))
        return True

    async def settle_embeds(self) -> None:
        """The last statement of the transaction: mark the windows finish_embed found with nothing
        pending as embedded, unless a write changed the window's row since (its rows wait then;
        the write took its row lock before our update, or our update's recheck sees its version).
        Done last, the window rows are locked only for the commit, not through the scans."""
        if not self._finished:
            return
        done = sorted(self._finished)
        self._finished.clear()
        await self.conn.execute("UPDATE ss_windows w SET needs_embed = 0 FROM unnest(%s::bigint[], %s::text[]) "
                                "AS f(wid, seen) WHERE w.wid = f.wid AND w.xmin = f.seen::xid",
                                ([wid for wid, _ in done], [seen for _, seen in done]))

    async def drop_embed_claim(self, wid: int, token: str) -> None:
        await self.conn.execute("DELETE FROM ss_embed_claims WHERE wid = %s AND token = %s", (wid, token))


# -- reads ----------------------------------------------------------------------------------------

async def meaning_head(reader: Reader, ano: int, model: str) -> MeaningHead:
    r = await reader.row(
        "SELECT a.meta_version, (SELECT mno FROM ss_embed_models WHERE model = %(model)s), a.embed_model, "
        "a.embed_seq, "
        "(SELECT coalesce(array_agg(wid), '{}') FROM ss_windows WHERE ano = %(ano)s AND needs_rebuild = 1), "
        "(SELECT coalesce(array_agg(wid), '{}') FROM ss_windows w WHERE ano = %(ano)s AND needs_embed = 1 "
        f"AND {embeddable('w')}) "
        "FROM ss_agents a WHERE a.ano = %(ano)s", {"model": model, "ano": ano})
    # one counter numbers both stores and deletions
    return MeaningHead(r[0], r[1], r[2], r[3], r[3], frozenset(r[4]), frozenset(r[5]))


async def embedding_changes(reader: Reader, ano: int, model_no: int, embed_seq: int, gone_seq: int
                            ) -> EmbeddingChanges:
    rows = await reader.all("SELECT id, mno, eseq, ts, scale, vec FROM ss_embeddings WHERE ano = %s AND eseq > %s",
                            (ano, embed_seq))
    gone = await reader.all("SELECT gseq, id FROM ss_embed_gone WHERE ano = %s AND gseq > %s ORDER BY gseq",
                            (ano, gone_seq))
    mine = [Embedded(r[0], r[3], r[4], bytes(r[5])) for r in rows if r[1] == model_no]
    other = [r[0] for r in rows if r[1] != model_no]
    seq = max([embed_seq, *(r[2] for r in rows), *(g[0] for g in gone)])
    return EmbeddingChanges(mine, other, [g[1] for g in gone], seq, seq)


async def indexed_rows(reader: Reader, rids: list[int]) -> list[RowHit]:
    rows = await reader.all("SELECT e.id, e.event_id, e.ts, e.text FROM ss_events e WHERE e.id = ANY(%s::bigint[]) "
                            "AND e.text IS NOT NULL AND EXISTS (SELECT 1 FROM ss_index i WHERE i.id = e.id)", (rids,))
    return [RowHit(rid, 0.0, mid, ts, text) for rid, mid, ts, text in rows]


async def embed_status(reader: Reader, ano: int, model: str) -> dict[str, int]:
    """The index rows of embeddable windows with an embedding of `model`, and without: an
    incognito session's rows are neither (they are never embedded, so never waiting). Those are
    counted by their windows' id ranges (rowids.window_ranges), primary-key range scans."""
    total, embedded, secret, secret_embedded = await reader.row(
        "WITH secret_w AS (SELECT w.wid FROM ss_sessions s JOIN ss_windows w ON w.ano = s.ano "
        "AND w.session_key = s.session_key WHERE s.ano = %(ano)s AND s.incognito = 1 AND w.cold = 0), "
        f"secret AS (SELECT {id_sql('wid', '0')} AS lo, {id_sql('wid', str(LOW_SEQS - 1))} | 1 AS hi FROM secret_w "
        f"UNION ALL SELECT {id_sql('wid', str(LOW_SEQS))}, {id_sql('wid', str(MAX_SEQ))} | 1 FROM secret_w), "
        "model AS (SELECT mno FROM ss_embed_models WHERE model = %(model)s) "
        "SELECT (SELECT count(*) FROM ss_index WHERE ano = %(ano)s), (SELECT count(*) FROM ss_embeddings m "
        "JOIN ss_index i ON i.id = m.id WHERE m.ano = %(ano)s AND m.mno = (SELECT mno FROM model)), "
        "(SELECT count(*) FROM secret JOIN ss_index i ON i.id BETWEEN secret.lo AND secret.hi), "
        "(SELECT count(*) FROM secret JOIN ss_embeddings m ON m.id BETWEEN secret.lo AND secret.hi "
        "JOIN ss_index i ON i.id = m.id WHERE m.mno = (SELECT mno FROM model))", {"ano": ano, "model": model})
    embedded -= secret_embedded  # a session made incognito after it was embedded
    return {"embeddedMessages": embedded, "embeddingBacklog": total - secret - embedded}


# -- packed blocks (store/packed.py) ----------------------------------------------------------------

async def load_embeddings(reader: Reader, ano: int, model_no: int, dims: int) -> tuple[Packed, EmbeddingChanges]:
    """The agent's embeddings of `model_no` as folded (none when the fold is of another model, or
    there is none), and the changes after the fold's counter, in the reader's snapshot. The blocks
    stream in the binary format, bound server-side (bytea as stored, not hex text twice its size:
    the pool's connections bind client-side, in text, db.Reader), each decoded as the next comes."""
    fold = await reader.one("SELECT mno, embed_seq, rows FROM ss_vec_folds WHERE ano = %s", (ano,))
    if fold is None or fold[0] != model_no:
        return packed.empty(model_no, dims), await embedding_changes(reader, ano, model_no, 0, 0)
    assert reader.conn is not None  # in its snapshot since the statement above
    out = packed.Unpacker(model_no, fold[1], fold[1], dims, fold[2])
    async for n, rids, ts, scales, vecs in psycopg.AsyncCursor(reader.conn).stream(
            "SELECT n, rids, ts, scales, vecs FROM ss_vec_blocks WHERE ano = %s ORDER BY bno", (ano,), binary=True):
        out.add((n, rids, ts, scales, vecs))
    return out.done(), await embedding_changes(reader, ano, model_no, fold[1], fold[1])


async def fold_state(reader: Reader, ano: int) -> tuple[int, int, int, int, int]:
    """(the fold's generation, rows, rows stored after it, the agent's current model and its
    dimensions); (0, 0, all, ...) with none."""
    fold = await reader.one("SELECT gen, rows, embed_seq FROM ss_vec_folds WHERE ano = %s", (ano,))
    gen, rows, seq = fold if fold is not None else (0, 0, -1)
    since, mno, dims = await reader.row(
        "SELECT (SELECT count(*) FROM ss_embeddings WHERE ano = %(ano)s AND eseq > %(seq)s), a.embed_model, "
        "coalesce(m.dims, 0) FROM ss_agents a LEFT JOIN ss_embed_models m ON m.mno = a.embed_model "
        "WHERE a.ano = %(ano)s", {"ano": ano, "seq": seq})
    return gen, rows, since, mno, dims


async def store_fold(conn: AsyncConnection, ano: int, gen: int, folded: Packed) -> bool:
    """Replace the agent's blocks with `folded` as fold `gen` + 1, unless another fold came after
    `gen` meanwhile (the fold row's lock orders them)."""
    await conn.execute("SET LOCAL synchronous_commit = off")  # derived data, as PgEmbedTx's
    row = await one(conn, "INSERT INTO ss_vec_folds AS f (ano, gen, mno, embed_seq, rows) VALUES (%s, %s, %s, %s, %s) "
                          "ON CONFLICT (ano) DO UPDATE SET gen = EXCLUDED.gen, mno = EXCLUDED.mno, "
                          "embed_seq = EXCLUDED.embed_seq, rows = EXCLUDED.rows WHERE f.gen = %s RETURNING 1",
                    (ano, gen + 1, folded.model_no, folded.embed_seq, len(folded), gen))
    if row is None:
        return False
    await conn.execute("DELETE FROM ss_vec_blocks WHERE ano = %s", (ano,))
    cur = psycopg.AsyncCursor(conn)
    await cur.executemany("INSERT INTO ss_vec_blocks (ano, bno, n, rids, ts, scales, vecs) "
                          "VALUES (%s, %s, %s, %b, %b, %b, %b)",
                          [(ano, bno, *block) for bno, block in enumerate(packed.to_blocks(folded))])
    return True
