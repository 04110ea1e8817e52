"""The connection pool of a PostgreSQL backend, and the two ways the store uses it: a write
transaction (retried on deadlock or serialization failure) and a reader block (one REPEATABLE
READ snapshot, stopped at its deadline by `statement_timeout`).

Connections are made with `prepare_threshold=None`: psycopg then never creates server-side
prepared statements, which PgBouncer in transaction pooling cannot follow (a statement prepared
on one server connection is unknown on the next). Session state is never set either: timeouts are
`SET LOCAL`, locks are transaction-level.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...errors import InvalidRequest, SearchTimeout, Unavailable
from . import arrays

T = TypeVar("T")
RETRIES = 8  # attempts of a write transaction that met a deadlock or a serialization failure
CONNECT_TIMEOUT_S = 3
# How long a request waits for a pooled connection before answering Unavailable: all of it while
# the server is away (the pool reconnects in the background, and the next request waits again)
WAIT_S = 2.0
RETRYABLE = (pgerrors.DeadlockDetected, pgerrors.SerializationFailure)
# Errors of class 54 (a statement past a server limit: 1664 target-list entries, too complex): the
# request's own size, which no retry mends, so a clear 400 rather than UNAVAILABLE
STATEMENT_LIMITS = (pgerrors.ProgramLimitExceeded, pgerrors.StatementTooComplex, pgerrors.TooManyColumns,
                    pgerrors.TooManyArguments)
# Every write transaction keeps the GIN index's pending list short (migration 7 left the limit to
# this setting): a search reads the whole list, and an append's insert that finds it over 64 kB
# moves it into the tree. A reconciliation raises it for its own bulk insert (reconcile.py).
BEGIN = "BEGIN; SET LOCAL gin_pending_list_limit = 64"


def connect_kwargs() -> dict[str, Any]:
    return {"autocommit": True, "prepare_threshold": None, "connect_timeout": CONNECT_TIMEOUT_S}


def make_pool(url: str, *, max_size: int) -> AsyncConnectionPool:
    """A pool lending connections unchecked: the first statement of a block (its BEGIN) is the
    check, and a connection found broken there (a server restart) is replaced and the block
    started again on another, before anything of it ran."""
    return AsyncConnectionPool(url, min_size=1, max_size=max_size, kwargs=connect_kwargs(), open=False,
                               configure=arrays.register,
                               timeout=WAIT_S, reconnect_timeout=0)  # keep trying to reconnect for ever


def unavailable(exc: BaseException) -> Unavailable:
    error = Unavailable(f"PostgreSQL is unavailable: {str(exc).strip() or type(exc).__name__}")
    error.__cause__ = exc
    return error


class Reader:
    """A read-only REPEATABLE READ snapshot on a pooled connection (an opaque Reader above the
    seam), begun lazily: the connection is taken and the transaction begun with the block's first
    statement, sent together (one round trip), and a statement the caller marks `last` carries
    the COMMIT too. A search is then one round trip, not three (BEGIN, the statement, COMMIT)."""

    __slots__ = ("conn", "_pool", "_deadline", "_state")

    def __init__(self, pool: AsyncConnectionPool, deadline: float) -> None:
        self.conn: psycopg.AsyncConnection | None = None
        self._pool = pool
        self._deadline = deadline
        self._state = "new"  # then "open" (in its transaction) or "done" (committed)

    @property
    def deadline(self) -> float:
        """When (time.monotonic) the search's budget ends: its statements' timeout, and the time
        its work between them checks (wide.py's scoring)."""
        return self._deadline

    async def all(self, sql: str, params: Any = None, *, last: bool = False) -> list[tuple[Any, ...]]:
        cur = await self._execute(sql, params, last)
        return await cur.fetchall()

    async def one(self, sql: str, params: Any = None, *, last: bool = False) -> tuple[Any, ...] | None:
        cur = await self._execute(sql, params, last)
        return await cur.fetchone()

    async def row(self, sql: str, params: Any = None, *, last: bool = False) -> tuple[Any, ...]:
        """The one row a statement always answers (an aggregate, or the agent's own row)."""
        return _present(await self.one(sql, params, last=last))

    async def _execute(self, sql: str, params: Any, last: bool) -> psycopg.AsyncCursor:
        if self._state == "done":
            raise RuntimeError("the reader's snapshot was committed by its last statement")
        if self._state == "open" and not last:
            assert self.conn is not None  # taken with the first statement
            return await self.conn.execute(sql, params)
        for attempt in range(3):
            if self.conn is None:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    raise SearchTimeout()
                self.conn = await self._pool.getconn(timeout=min(remaining, WAIT_S))
            first = self._state == "new"
            try:
                return await self._send(sql, params, last)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                if not first or attempt == 2 or not (self.conn.broken or self.conn.closed):
                    raise
                # a connection found broken by the block's first statement (a server restart): the
                # pool discards it, and the block begins on another, nothing of it having run
                conn, self.conn, self._state = self.conn, None, "new"
                await self._pool.putconn(conn)
        raise AssertionError("unreachable")

    async def _send(self, sql: str, params: Any, last: bool) -> psycopg.AsyncCursor:
        """The statement with the BEGIN before it (when the block has not begun) and the COMMIT
        after it (when `last`), as one simple-protocol query: the driver binds the parameters
        client-side (psycopg's ClientCursor, which quotes each value as a literal), since the
        extended protocol takes one statement a message and psycopg's pipeline mode cost more in
        Python than the round trips it saves."""
        parts = []
        if self._state == "new":
            # Every read has an index to take; before autovacuum has analyzed a fresh import the
            # planner took a sequential scan of the index rows for a rare word.
            # No JIT: a common word's statement costs past jit_above_cost, and compiling it took
            # longer than running it
            parts += ["BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", "SET LOCAL enable_seqscan = off",
                      "SET LOCAL jit = off"]
            if not math.isinf(self._deadline):
                parts.append(f"SET LOCAL statement_timeout = {max(1, int((self._deadline - time.monotonic()) * 1000))}")
        before = len(parts)
        parts.append(sql)
        if last:
            parts.append("COMMIT")
        assert self.conn is not None  # taken above
        cur = psycopg.AsyncClientCursor(self.conn)
        if before:
            self._state = "open"
        await cur.execute("; ".join(parts), params)
        for _ in range(before):
            cur.nextset()
        if last:
            self._state = "done"
        return cur

    async def close(self, ok: bool) -> None:
        """Commit (`ok`) or roll back the snapshot if one is open, and hand the connection back."""
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            if self._state == "open" and not conn.closed and not conn.broken:
                if ok:
                    await conn.execute("COMMIT")
                else:
                    try:
                        await conn.execute("ROLLBACK")
                    except psycopg.Error:
                        pass  # the connection went meanwhile: the error that came first is the one to tell
        finally:
            self._state = "done"
            await self._pool.putconn(conn)


class Db:
    """One pool per process and database URL, shared by every agent's store."""

    def __init__(self, url: str, *, max_size: int) -> None:
        self.url = url
        self.pool = make_pool(url, max_size=max_size)

    async def open(self) -> None:
        await self.pool.open(wait=False)

    async def close(self) -> None:
        await self.pool.close()

    @asynccontextmanager
    async def _begun(self, begin: str, timeout: float) -> AsyncIterator[psycopg.AsyncConnection]:
        """A pooled connection inside a transaction opened by `begin` (one round trip), committed
        at the end of the block, rolled back on an error. A connection that fails its BEGIN is
        dropped and another tried (the pool replaces it)."""
        for attempt in range(3):
            async with self.pool.connection(timeout=timeout) as conn:
                try:
                    await conn.execute(begin)
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    if attempt == 2:
                        raise
                    continue  # a broken connection goes back to the pool, which discards it
                try:
                    yield conn
                except BaseException:
                    if not conn.closed and not conn.broken:
                        try:
                            await conn.execute("ROLLBACK")
                        except psycopg.Error:
                            pass  # the connection went meanwhile: the error that came first is the one to tell
                    raise
                await conn.execute("COMMIT")
                return

    async def tx(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `fn(conn, *args)` in one transaction; a deadlock or serialization failure rolls it
        back and runs it again (a few times, with jitter); a lost server raises Unavailable."""
        for attempt in range(RETRIES):
            try:
                async with self._begun(BEGIN, WAIT_S) as conn:
                    return await fn(conn, *args)
            except RETRYABLE as exc:
                if attempt == RETRIES - 1:
                    raise unavailable(exc) from exc
                await asyncio.sleep(random.uniform(0, 0.005 * 2 ** attempt))
            except (PoolTimeout, psycopg.OperationalError, psycopg.InterfaceError) as exc:
                raise unavailable(exc) from exc
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def reader(self, deadline: float = math.inf) -> AsyncIterator[Reader]:
        if deadline - time.monotonic() <= 0:
            raise SearchTimeout()
        reader = Reader(self.pool, deadline)
        try:
            try:
                yield reader
            except BaseException:
                await reader.close(False)
                raise
            await reader.close(True)
        except pgerrors.QueryCanceled:
            raise SearchTimeout() from None
        except STATEMENT_LIMITS as exc:  # the request's own size, not the server's state: no retry helps
            # no legal query should reach one (store/postgres/wide.py searches many words)
            raise InvalidRequest("the request is more than PostgreSQL can run as one statement "
                                 f"({str(exc).strip()})") from None
        except PoolTimeout as exc:
            if time.monotonic() >= deadline:
                raise SearchTimeout() from None
            raise unavailable(exc) from exc
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise unavailable(exc) from exc


async def one(conn: psycopg.AsyncConnection, sql: str, params: Any = None) -> tuple[Any, ...] | None:
    cur = await conn.execute(sql, params)
    return await cur.fetchone()


async def the_row(conn: psycopg.AsyncConnection, sql: str, params: Any = None) -> tuple[Any, ...]:
    """The one row a statement always answers (an aggregate, a sequence, a row this transaction holds)."""
    return _present(await one(conn, sql, params))


def _present(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    if row is None:
        raise LookupError("a statement that always answers one row answered none")
    return row


async def all_rows(conn: psycopg.AsyncConnection, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    cur = await conn.execute(sql, params)
    return await cur.fetchall()


async def now_s(conn: psycopg.AsyncConnection) -> float:
    """The database's clock (epoch s): leases compare against one clock, whichever host writes."""
    clock: float = (await the_row(conn, "SELECT extract(epoch FROM clock_timestamp())::float8"))[0]
    return clock
