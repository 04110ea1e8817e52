"""The reconcile actor, enqueue deduplication, and the per-process engine the actor works with.

Messages carry only ids (agent id, window id). Dramatiq with Redis delivers at least once, so the
job relies on the store's claim and lease, not on being delivered once. A marker per window
(`SET NX` with an expiry, in Redis; a dict in the embedded mode) keeps a window that is already
queued or being reconciled from being queued again; the job clears it when it ends.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable
from typing import Any

import dramatiq
import redis
import structlog
from dramatiq.brokers.redis import RedisBroker

from .. import metrics
from ..embed import EmbedderFailed
from ..engine import Engine
from ..errors import NotFound
from ..indexer.reconcile import window_gen
from ..metrics import error_kind
from ..settings import Settings
from ..store.base import ReconcileOutcome
from .broker import EMBED_QUEUE, EXHAUSTED_ACTOR, FAILING, NAMESPACE, QUEUE
from .outbox import Outbox

log = structlog.get_logger("sessionsearch.queue")

MARKER_TTL_S = 900  # a marker outlives any retry chain; a lost one only delays a re-enqueue
RECENT_S = 5.0  # windows this process queued this recently are not even asked about again
SEND_INLINE = 20  # a search with more windows than this does not wait for them to be queued
MAX_RETRIES = 8
ACQUIRE_CHUNK = 1000  # windows marked per script call: each call stays a few ms, well within a request's timeout
RELEASE_EVERY_S = 0.02  # finished jobs' markers are cleared together, this often
MORE_S = 1.0  # a job that published its window goes on with the windows waiting next to it this long


# Markers live in one sorted set: member "agent:window", score = when it expires (epoch s).
# One call reads every score (ZMSCORE) and one adds the fresh ones, whatever the number of windows.
_ACQUIRE = """
local now = tonumber(ARGV[1])
local expires = now + tonumber(ARGV[2])
local force = ARGV[3] == '1'
local before = tonumber(ARGV[5])  -- a marker set before this (epoch s) is taken over too
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local members = {}
for member in string.gmatch(ARGV[4], '[^,]+') do members[#members + 1] = member end
local flags = {}
for first = 1, #members, 4000 do
  local last = math.min(first + 3999, #members)
  local scores = redis.call('ZMSCORE', KEYS[1], unpack(members, first, last))
  local add = {}
  for i, score in ipairs(scores) do
    local fresh = force or not score or tonumber(score) - tonumber(ARGV[2]) < before
    flags[#flags + 1] = fresh and '1' or '0'
    if fresh then
      add[#add + 1] = expires
      add[#add + 1] = members[first + i - 1]
    end
  end
  for a = 1, #add, 4000 do
    redis.call('ZADD', KEYS[1], unpack(add, a, math.min(a + 3999, #add)))
  end
end
return table.concat(flags)
"""


class Markers:
    """Which windows are queued or being reconciled: a Redis sorted set with expiries, else a dict."""

    def __init__(self, client: redis.Redis | None, *, zset: str = f"{NAMESPACE}:queued") -> None:
        self.client = client
        self.zset = zset
        self._acquire = client.register_script(_ACQUIRE) if client is not None else None
        self._local: dict[str, float] = {}
        self._lock = threading.Lock()
        self._releasing: list[str] = []
        self._flusher: threading.Thread | None = None

    @staticmethod
    def key(agent_id: str, wid: int) -> str:
        return f"{agent_id}:{wid}"

    def acquire(self, items: list[tuple[str, int]], *, force: bool = False,
                set_before: float = 0.0) -> list[tuple[str, int]]:
        """Mark each window; return those that were not marked already (a round trip per ACQUIRE_CHUNK).

        `force` marks and returns them all (a periodic sweep: it sends only windows with no job
        waiting or running, whose markers were lost). `set_before` (epoch s) takes over the markers
        set before then as well (a worker's startup sweep, from when it began: a marker may outlive
        a worker killed mid-job), but not those set since, by another process that has just sent
        the job: workers started together would otherwise each send every dirty window, and a
        window's duplicate jobs cost a job each (docs/performance/postgres.md, "Import and
        reconciliation: jobs and CPU").
        """
        if self._acquire is not None:
            fresh = []
            for first in range(0, len(items), ACQUIRE_CHUNK):
                chunk = items[first:first + ACQUIRE_CHUNK]
                members = ",".join(self.key(agent_id, wid) for agent_id, wid in chunk)
                flags = self._acquire(keys=[self.zset], args=[time.time(), MARKER_TTL_S, int(force), members,
                                                              set_before])
                fresh += [item for item, flag in zip(chunk, flags) if flag == 49]  # b"1"
            return fresh
        now = time.monotonic()
        before = now - (time.time() - set_before) + MARKER_TTL_S  # the expiry of a marker set then
        fresh = []
        with self._lock:
            for item in items:
                key = self.key(*item)
                if force or self._local.get(key, 0) < max(now, before):
                    self._local[key] = now + MARKER_TTL_S
                    fresh.append(item)
        return fresh

    def release(self, items: Iterable[tuple[str, int]]) -> None:
        members = [self.key(a, w) for a, w in items]
        if not members:
            return
        if self.client is not None:
            self.client.zrem(self.zset, *members)
        else:
            with self._lock:
                for member in members:
                    self._local.pop(member, None)

    def release_soon(self, item: tuple[str, int]) -> None:
        """Clear a finished job's marker within RELEASE_EVERY_S, together with others finishing then.

        One ZREM for many jobs instead of a round trip on the event loop per job. A marker left
        behind by a killed worker only delays that window's next enqueue until the marker expires
        or a worker's startup sweep sends it again.
        """
        if self.client is None:
            self.release([item])
            return
        with self._lock:
            self._releasing.append(self.key(*item))
            if self._flusher is None or not self._flusher.is_alive():
                self._flusher = threading.Thread(target=self._flush_loop, name="sessionsearch-markers", daemon=True)
                self._flusher.start()

    def _flush_loop(self) -> None:
        while True:
            time.sleep(RELEASE_EVERY_S)
            if not self.flush():
                return

    def flush(self) -> bool:
        """Clear the markers waiting in release_soon now; False when none were waiting."""
        if self.client is None:
            return False
        with self._lock:
            members, self._releasing = self._releasing, []
            if not members:
                self._flusher = None
                return False
        try:
            self.client.zrem(self.zset, *members)
        except (redis.RedisError, OSError):
            log.warning("queue.marker_release_failed", markers=len(members))  # they expire on their own
        return True


class Reconciler:
    """The `reconcile` actor on a broker, and the enqueue side that feeds it."""

    def __init__(self, broker: dramatiq.Broker, settings: Settings) -> None:
        self.broker = broker
        self.settings = settings
        client = broker.client if isinstance(broker, RedisBroker) else None
        self.markers = Markers(client)
        self.stopping = threading.Event()
        self._engine: Engine | None = None
        self._engine_lock: asyncio.Lock | None = None
        self._recent: dict[tuple[str, int], float] = {}
        self._last: tuple[dict[str, frozenset[int]], float] = ({}, 0.0)  # the last enqueue's windows, until
        self._recent_lock = threading.Lock()
        self.outbox = Outbox(self._deliver, wait_s=settings.redis_request_timeout_ms / 1000)
        # dramatiq's hints take a function or options, not both as its code does
        self.exhausted = dramatiq.actor(  # type: ignore[call-overload]
            self._exhausted, broker=broker, actor_name=EXHAUSTED_ACTOR, queue_name=QUEUE,
            max_retries=MAX_RETRIES, min_backoff=1_000, max_backoff=60_000,
            throws=(NotFound,))  # the agent is gone: nothing to note
        self.actor = dramatiq.actor(  # type: ignore[call-overload]
            self._reconcile, broker=broker, actor_name="reconcile", queue_name=QUEUE,
            max_retries=MAX_RETRIES, min_backoff=1_000, max_backoff=60_000,
            time_limit=int(self.time_limit_s * 1000), throws=(NotFound,), on_retry_exhausted=EXHAUSTED_ACTOR)
        # the meaning index's job (SPEC §3): a window's pending rows embedded in batches; markers of
        # its own, so a window queued for reconciliation is still queued for embeddings once, and a
        # queue of its own, so reconciliation's depth and sweeps count only reconcile jobs
        self.embed_markers = Markers(client, zset=f"{NAMESPACE}:embed-queued")
        self.embed_actor = dramatiq.actor(  # type: ignore[call-overload]
            self._embed, broker=broker, actor_name="embed", queue_name=EMBED_QUEUE,
            max_retries=MAX_RETRIES, min_backoff=1_000, max_backoff=60_000,
            time_limit=int(self.time_limit_s * 1000), throws=(NotFound,))

    @property
    def time_limit_s(self) -> float:
        return max(60.0, self.settings.claim_lease_s * 10)

    # -- enqueue (search and sweep side) -------------------------------------------------------

    def enqueue_sync(self, dirty: dict[str, set[int]], *, force: bool = False,
                     set_before: float = 0.0) -> tuple[int, int]:
        """Queue, on this thread, one job per window not already queued (`force`: every window;
        `set_before`: also those marked before then, see Markers.acquire). Returns (sent,
        deduplicated); raises redis errors when the broker cannot be reached."""
        fresh, deduplicated = self._mark(dirty, force=force, set_before=set_before)
        self._send(fresh)
        return len(fresh), deduplicated

    def _mark(self, dirty: dict[str, set[int]], *, force: bool,
              set_before: float = 0.0) -> tuple[list[tuple[str, int]], int]:
        """Set the markers; returns the windows that were not marked already, and how many were."""
        items = [(agent_id, wid) for agent_id, wids in sorted(dirty.items()) for wid in sorted(wids)]
        everything = len(items)
        now = time.monotonic()
        # while a backlog drains, every search meets it: skip what was just queued here
        if not force and not set_before:
            with self._recent_lock:
                items = [item for item in items if self._recent.get(item, 0.0) < now]
        fresh = self.markers.acquire(items, force=force, set_before=set_before)
        with self._recent_lock:
            if len(self._recent) > 100_000:
                self._recent = {k: t for k, t in self._recent.items() if t >= now}
            for item in items:  # queued by us or by another process: either way, queued
                self._recent[item] = now + RECENT_S
        metrics.get().enqueues_deduplicated.inc(everything - len(fresh))
        if fresh:
            log.info("search.enqueued", windows=len(fresh), deduplicated=everything - len(fresh))
        return fresh, everything - len(fresh)

    def _send(self, items: list[tuple[str, int]]) -> None:
        """Send a job per window; on a failure, clear what is left unsent so the next search or sweep
        tries it again, and raise."""
        m = metrics.get()
        for n, (agent_id, wid) in enumerate(items):
            try:
                self.actor.send(agent_id, wid)
            except Exception:
                log.warning("queue.send_failed", agent=agent_id, wid=wid, unsent=len(items) - n)
                with self._recent_lock:
                    for item in items[n:]:
                        self._recent.pop(item, None)
                try:
                    self.markers.release(items[n:])
                except (redis.RedisError, OSError):
                    pass  # still unreachable: the markers expire, and a worker's sweep sends them meanwhile
                raise
            m.enqueues.inc()

    async def enqueue(self, dirty: dict[str, set[int]]) -> bool:
        """The engine's enqueuer: False when the queue could not be reached in time (see Outbox).

        While a backlog drains every search meets the same dirty windows: when all of them were
        queued from here within the last few seconds, this answers without leaving the event loop.
        More than SEND_INLINE windows (an import's worth) are handed over without waiting: marking
        them takes Redis a while, and the markers' script is atomic, so concurrent
        searches still queue each window once.
        """
        now = time.monotonic()
        last_sets, last_until = self._last
        if now < last_until and all(wids <= last_sets.get(agent, frozenset()) for agent, wids in dirty.items()):
            metrics.get().enqueues_deduplicated.inc(sum(len(w) for w in dirty.values()))
            return True
        self._last = ({agent: frozenset(wids) for agent, wids in dirty.items()}, now + RECENT_S)
        return await self.outbox.put(dirty, wait=sum(len(w) for w in dirty.values()) <= SEND_INLINE)

    def _deliver(self, dirty: dict[str, set[int]], searches: int) -> bool:
        """One round of the outbox: mark the windows and send the jobs of those not queued already;
        False (counted once per search, logged, and tried again by the next search) on a Redis error."""
        try:
            fresh, _ = self._mark(dirty, force=False)
            self._send(fresh)
        except (redis.RedisError, OSError) as exc:
            # markers the server set before the answer was lost stay until they expire; a worker's
            # periodic sweep sends those windows meanwhile (it looks at jobs, not markers)
            self._last = ({}, 0.0)
            metrics.get().enqueue_failures.inc(max(searches, 1))
            log.warning("search.enqueue_failed", agents=len(dirty), windows=sum(len(w) for w in dirty.values()),
                        error=f"{type(exc).__name__}: {exc}")
            return False
        return True

    def join_senders(self, timeout: float = 30.0) -> None:
        self.outbox.join(timeout)

    def close(self, timeout: float = 30.0) -> None:
        self.outbox.close(timeout)

    # -- the job (worker side) -----------------------------------------------------------------

    async def engine(self) -> Engine:
        if self._engine_lock is None:
            self._engine_lock = asyncio.Lock()
        async with self._engine_lock:
            if self._engine is None:
                # the job's engine shares the process with Dramatiq's threads: rows go in by SQL
                self._engine = await Engine(settings=self.settings, reconcile_rows_in_sql=True).open()
            return self._engine

    async def close_engine(self) -> None:
        self.markers.flush()  # markers of jobs that just finished, before the process goes
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await engine.close()

    async def _reconcile(self, agent_id: str, wid: int) -> None:
        engine = await self.engine()
        started = time.monotonic()
        try:
            result = await asyncio.wait_for(
                engine.reconcile(agent_id, wid, should_stop=self.stopping.is_set, more_s=MORE_S), self.time_limit_s)
        except NotFound:
            self.markers.release([(agent_id, wid)])
            metrics.get().observe_reconcile("missing", time.monotonic() - started, 0, 0)
            raise
        except BaseException as exc:
            metrics.get().observe_reconcile("failed", time.monotonic() - started, 0, 0)
            log.warning("reconcile.failed", agent=agent_id, wid=wid, error=type(exc).__name__)
            raise  # Dramatiq retries with backoff; the marker stays while it does
        published = 1 + len(result.beside) if result.outcome == ReconcileOutcome.PUBLISHED else 0
        metrics.get().observe_reconcile(result.outcome, result.seconds, result.rows_inserted, result.rows_deleted,
                                        published)
        if result.outcome == ReconcileOutcome.BUSY:
            # a live claim elsewhere: look again once its lease could have run out
            raise dramatiq.Retry(delay=int(self.settings.claim_lease_s * 1000))
        if result.outcome == ReconcileOutcome.STOPPED:  # this worker is shutting down: hand the window to another
            self.actor.send(agent_id, wid)
            return
        self.markers.release_soon((agent_id, wid))

    async def enqueue_embed(self, pending: dict[str, set[int]]) -> bool:
        """The engine's embed enqueuer: one embed job per window not already queued (deduplicated
        by its markers); False when the queue could not be reached."""
        items = [(agent_id, wid) for agent_id, wids in sorted(pending.items()) for wid in sorted(wids)]
        if self.embed_markers.client is None:
            return self._send_embeds(items)
        try:
            return await asyncio.wait_for(asyncio.to_thread(self._send_embeds, items),
                                          self.settings.redis_request_timeout_ms / 1000 * 2)
        except TimeoutError:
            return False

    def enqueue_embed_sync(self, pending: dict[str, set[int]], *, force: bool = False,
                           set_before: float = 0.0) -> int:
        """Queue, on this thread, one embed job per window not already queued (`force` and
        `set_before` as in Markers.acquire: a sweep's takeover of the markers of lost jobs); returns
        how many were sent; raises redis errors when the broker cannot be reached."""
        items = [(agent_id, wid) for agent_id, wids in sorted(pending.items()) for wid in sorted(wids)]
        fresh = self.embed_markers.acquire(items, force=force, set_before=set_before)
        for n, (agent_id, wid) in enumerate(fresh):
            try:
                self.embed_actor.send(agent_id, wid)
            except Exception:
                self.embed_markers.release(fresh[n:])
                raise
        return len(fresh)

    def _send_embeds(self, items: list[tuple[str, int]]) -> bool:
        pending: dict[str, set[int]] = {}
        for agent_id, wid in items:
            pending.setdefault(agent_id, set()).add(wid)
        try:
            self.enqueue_embed_sync(pending)
        except (redis.RedisError, OSError) as exc:
            metrics.get().enqueue_failures.inc()
            log.warning("search.embed_enqueue_failed", windows=len(items), error=f"{type(exc).__name__}: {exc}")
            return False
        return True

    async def _embed(self, agent_id: str, wid: int) -> None:
        engine = await self.engine()
        m = metrics.get()
        try:
            result = await asyncio.wait_for(
                engine.embed(agent_id, wid, should_stop=self.stopping.is_set, observe=m.observe_embed_batch),
                self.time_limit_s)
        except NotFound:
            self.embed_markers.release([(agent_id, wid)])
            raise
        except EmbedderFailed as exc:
            m.embedder_errors.labels(kind=error_kind(exc)).inc()
            raise  # Dramatiq retries with backoff; nothing of the batch was stored; the marker stays
        if result.outcome == "busy":  # another embed job holds it: look again once its lease could have run out
            raise dramatiq.Retry(delay=int(self.settings.claim_lease_s * 1000))
        if result.outcome == "stopped":
            self.embed_actor.send(agent_id, wid)
            return
        self.embed_markers.release_soon((agent_id, wid))

    async def _exhausted(self, message: dict[str, Any], retries: dict[str, Any]) -> None:
        """A reconcile job failed every retry and is dead-lettered: note the window's generation, so
        that the periodic sweep sends it again only once it changed (worker/sweep.py)."""
        agent_id, wid = message["args"]
        try:
            store = await (await self.engine()).store(agent_id)
            gen = await window_gen(store, wid)
            log.error("reconcile.dead_lettered", agent=agent_id, wid=wid, attempts=retries.get("retries", 0) + 1,
                      error=(message.get("options", {}).get("traceback") or "").strip().rsplit("\n", 1)[-1],
                      rebuild_gen=gen.rebuild_gen if gen else None)
            if gen is not None and gen.needs_rebuild and self.markers.client is not None:
                self.markers.client.hset(FAILING, Markers.key(agent_id, wid), gen.rebuild_gen)
        finally:  # counted last: whoever waits on the count finds the note written
            metrics.get().reconcile_dead_lettered.inc()
