"""Writes never wait behind an embed job (issue 40): an embed job's transaction, held open after it
claimed a window and scanned it (or stored its embeddings and found nothing left), holds no lock an
append or a rewind to that window waits on; and what those writes add is still embedded after."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import numpy as np

from sessionsearch.indexer.embedding import _claim_and_read, _store_and_read, embed_window
from sessionsearch.protocol import AppendParams
from sessionsearch.store.base import EmbedClaim, Embedded

from ..helpers import BASE_TS, engine_at, leaf, msg, sql_rows

KEY = "agent:main:held"
WRITE_S = 30  # the writes wait on nothing; a write blocked by the held transaction never ends


class Tiny:
    """An embedder of 4 dimensions, from the text's length."""

    model = "test:tiny_4"
    dimensions = 4
    batch_rows = 512

    async def embed(self, texts: list[str]) -> Any:
        return [[1.0, float(len(t)), 0.5, -1.0] for t in texts]

    async def embed_query(self, text: str) -> Any:
        return (await self.embed([text]))[0]

    async def aclose(self) -> None:
        return None


async def _held(store: Any, step: Any) -> tuple[asyncio.Task[Any], asyncio.Event]:
    """Run `step` in an embed transaction left open after it (until the event returned is set)."""
    inside, go = asyncio.Event(), asyncio.Event()

    async def run(tx: Any) -> Any:
        out = await step(tx)
        inside.set()
        await go.wait()
        return out
    task = asyncio.create_task(store.reconcile_tx(run))
    await asyncio.wait_for(inside.wait(), WRITE_S)
    return task, go


async def _pending(store: Any) -> tuple[int, int]:
    """(index rows without an embedding, the window's needs_embed)."""
    (left,), = await sql_rows(store, "", "SELECT count(*) FROM ss_index i WHERE NOT EXISTS "
                                         "(SELECT 1 FROM ss_embeddings m WHERE m.id = i.id)")
    (needs,), = await sql_rows(store, "", "SELECT needs_embed FROM ss_windows")
    return left, needs


async def test_appends_and_rewinds_do_not_wait_on_an_embed_transaction(pg):
    talk = [msg(f"m{i}", "user" if i % 2 else "assistant", f"line {i} of a talk", f"m{i - 1}" if i > 1 else None,
                ts=BASE_TS + i) for i in range(1, 41)]
    embedder = Tiny()
    async with engine_at(pg) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=talk))
        store = await engine.store("main")
        (wid,), = await sql_rows(store, "", "SELECT wid FROM ss_windows")
        token, held = uuid.uuid4().hex, {}
        # the agent's model set (once per model: it marks every window, under their row locks)
        await store.reconcile_tx(lambda tx: tx.embed_model(embedder.model, embedder.dimensions))

        # 1. the claim transaction: the window claimed and its pending rows read, still open
        task, go = await _held(store, lambda tx: _claim_and_read(tx, wid, token, 60.0, embedder.model,
                                                                   embedder.dimensions, 512, held))
        await asyncio.wait_for(engine.append(AppendParams(sessionKey=KEY, events=[
            msg("a1", "user", "appended while the claim is open", "m40", ts=BASE_TS + 41)])), WRITE_S)
        await asyncio.wait_for(engine.append(AppendParams(sessionKey=KEY, events=[
            leaf("l1", "a1", "m38")])), WRITE_S)
        go.set()
        claim, mno, rows = await task
        assert claim == EmbedClaim.CLAIMED and len(rows) == 40
        await engine.reconcile_pending()  # m39, m40 and a1 left the branch, and the index

        # 2. the store transaction: those rows stored, nothing left found, the window not yet let go
        made = [Embedded(r.rid, r.ts, 1.0, np.ones(4, np.int8).tobytes()) for r in rows]
        task, go = await _held(store, lambda tx: _store_and_read(tx, token, 60.0, mno, made, held, 512))
        await asyncio.wait_for(engine.append(AppendParams(sessionKey=KEY, events=[
            msg("a2", "user", "appended while the store is open", "m38", ts=BASE_TS + 42)])), WRITE_S)
        await asyncio.wait_for(engine.append(AppendParams(sessionKey=KEY, events=[
            leaf("l2", "a2", "a1")])), WRITE_S)
        go.set()
        await task
        await engine.reconcile_pending()

        # the rows those writes brought back are waiting still: the job's "nothing left" was before them
        left, needs = await _pending(store)
        assert left > 0 and needs == 1
        result = await embed_window(store, embedder, wid)
        assert result.outcome == "embedded"
        assert await _pending(store) == (0, 0)
