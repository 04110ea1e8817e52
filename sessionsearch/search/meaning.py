"""Search by meaning (SPEC §4 `mode`): semantic neighbours, and their fusion with keyword hits.

Per agent in scope, in one reader: the meaning index's head (model numbers, change counters, the
windows needing reconciliation or embeddings), the agent's vectors in memory brought up to date
(search/vectors.py), the best rows of the scope by cosine similarity (windows needing
reconciliation left out, as keyword search leaves them out), then those rows read back from the
word index, so a row that left it (rewound away, deleted) never answers even before its embedding
goes. Windows with rows still waiting for an embedding of the current model are queued for the
embed job and the answer says `indexing: true`.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import structlog

from ..embed import EmbedderFailed
from ..store.rowids import wid_of
from ..text.utf16 import utf16_len
from .anyword import any_word, keep_in_top
from .catalog import CatalogView
from .context import SearchContext
from .execute import check_empty_scopes, run_query
from .outcome import Hit, Outcome, SessionGroup
from .plan import Scope
from .query import ParsedQuery, SearchRequest
from .vectors import LOAD_WAIT_S, AgentVectors, Meaning
from .visits import MetaChanged, bounded

if TYPE_CHECKING:
    from ..embed import Embedder

log = structlog.get_logger("sessionsearch.search")

FUSE_DEPTH = 50  # hits of each list a hybrid search fuses
SESSIONS_DEPTH = 100  # hits a resultMode "sessions" search groups
# the longest a search waits on the embedder (the query's vector, the passages for snippets): an
# endpoint's own time-out and retries are for the workers' batches, not for a caller waiting
EMBED_WAIT_S = 10.0
THREADED_ROWS = 100_000  # an agent with more rows than this is scored on a thread
# rows this close to the best one answer whatever the floor, when the best reaches the model's
# `least_score`: a search with weak neighbours is never emptied (a question in one language about
# messages in another still gets its nearest); measured by bench/bench_quality.py
NEAR_BEST = 0.05
# hybrid's keyword share falls as the cube of a row's BM25 over the keyword list's best: a row
# holding the query's rare words keeps most of the embedder's `keyword_weight`, one holding only
# its common words next to none (bench/bench_quality.py: squared or cubed, cubed lost no recall@5
# column for either built-in model)
KEYWORD_POWER = 3
# a row of the keyword list scoring less than this holds only words found in half the rows or more,
# which BM25 weighs 1e-6 each (FTS5's floor, PostgreSQL's copy of it): no evidence, left out
KEYWORD_EVIDENCE = 1e-3


@dataclass
class Found:
    """One agent's semantic answer."""

    agent_id: str
    hits: list[Hit]
    above: int  # rows in scope at or above the floor
    dirty: set[int]
    pending: set[int]
    loading: bool = False  # the agent's vectors were still loading (search/vectors.py)


@dataclass
class MeaningOutcome:
    hits: list[Hit] = field(default_factory=list)
    more: bool = False
    dirty: dict[str, set[int]] = field(default_factory=dict)
    pending: dict[str, set[int]] = field(default_factory=dict)
    failed: bool = False  # the query could not be embedded, or an agent's vectors were still loading


def embed_wait_s(deadline: float) -> float:
    """How long a search waits on the embedder: half of what is left of its budget, at most
    EMBED_WAIT_S, so a slow endpoint leaves time for the keyword part and the rest of the answer."""
    return max(0.0, min(EMBED_WAIT_S, (deadline - time.monotonic()) / 2))


async def query_vector(embedder: Embedder, text: str, deadline: float = math.inf) -> npt.NDArray[np.float32] | None:
    """The query's embedding, or None when the embedder failed or was too slow (the answer then says
    `indexing: true`: meaning could not be searched)."""
    wait = embed_wait_s(deadline)
    try:
        async with asyncio.timeout(wait):
            return await embedder.embed_query(text)
    except EmbedderFailed as exc:
        log.warning("search.embed_failed", error=str(exc))
    except TimeoutError:
        log.warning("search.embed_failed", error=f"the embedder did not answer within {wait:.1f} s")
    return None


async def semantic(ctx: SearchContext, embedder: Embedder, vector: npt.NDArray[np.float32], req: SearchRequest,
                   scopes: dict[str, Scope], versions: dict[str, int] | None, deadline: float, k: int
                   ) -> MeaningOutcome:
    """The best `k` rows by similarity over the scopes (merged across agents)."""
    async def agent(scope: Scope) -> Found:
        return await _agent_semantic(ctx, embedder, ctx.meaning, vector, req, scope, versions, deadline, k)

    out = MeaningOutcome()
    for found in await bounded(agent, [s for s in scopes.values() if s.wids], ctx.fanout):
        out.hits += found.hits
        out.more |= found.above > len(found.hits)
        out.failed |= found.loading
        if found.dirty:
            out.dirty[found.agent_id] = found.dirty
        if found.pending:
            out.pending[found.agent_id] = found.pending
    out.hits.sort(key=lambda h: (h.rank, -h.ts, h.message_id))
    if len(out.hits) > k:
        out.more = True
        out.hits = out.hits[:k]
    return out


async def _agent_semantic(ctx: SearchContext, embedder: Embedder, meaning: Meaning,
                          vector: npt.NDArray[np.float32], req: SearchRequest, scope: Scope,
                          versions: dict[str, int] | None, deadline: float, k: int) -> Found:
    store = await ctx.host.store(scope.agent_id)
    held, lock = meaning.vectors.slot(store)
    if held is None:  # none of the agent's vectors in this process yet: a load it waits on, bounded
        wait = min(LOAD_WAIT_S, max(0.0, deadline - time.monotonic()) / 2)
        loaded, held = await meaning.vectors.load(store, embedder.model, embedder.dimensions, wait)
        if not loaded:
            return Found(scope.agent_id, [], 0, set(), set(), loading=True)
    async with lock, store.reader(deadline) as reader:
        head = await store.meaning_head(reader, embedder.model)
        if versions is not None and head.meta_version != versions.get(scope.agent_id):
            raise MetaChanged(scope.agent_id)
        dirty = scope.wids & head.dirty
        if head.model_no is None or head.current_no != head.model_no:
            pending = scope.wids - dirty  # nothing is embedded with this model yet: all of it waits
        else:
            pending = (scope.wids & head.pending) - dirty
        if head.model_no is None:
            return Found(scope.agent_id, [], 0, dirty, pending)
        if held is None or held.model_no != head.model_no:
            held = AgentVectors(head.model_no, embedder.dimensions)
        if (held.embed_seq, held.gone_seq) != (head.embed_seq, head.gone_seq):
            held.apply(await store.embedding_changes(reader, head.model_no, held.embed_seq, held.gone_seq))
        meaning.vectors.keep(store, held)
        allowed_wids = scope.wids - dirty
        size = max(max(allowed_wids, default=0), int(held.wid[:held.n].max(initial=0))) + 1
        allowed = np.zeros(size, bool)
        if allowed_wids:
            allowed[np.fromiter(allowed_wids, np.int64, len(allowed_wids))] = True
        # rows read back may have left the word index: ask for more than k, and again while short
        want = k + 8
        hits: list[Hit] = []
        above = 0
        while True:
            args = dict(allowed=allowed, role=req.role, since=req.since, until=req.until,
                        floor=embedder.min_score if meaning.min_score is None else meaning.min_score,
                        near=NEAR_BEST, least=embedder.least_score, k=want)
            if held.n > THREADED_ROWS:
                rids, sims, above = await asyncio.to_thread(held.top, vector, **args)  # type: ignore[arg-type]
            else:
                rids, sims, above = held.top(vector, **args)  # type: ignore[arg-type]
            sim_of = dict(zip(rids.tolist(), sims.tolist()))
            rows = await store.indexed_rows(reader, list(sim_of)) if sim_of else []
            hits = [Hit(scope.agent_id, r.row_id, -sim_of[r.row_id], r.message_id, r.ts, r.text) for r in rows
                    if wid_of(r.row_id) in allowed_wids]
            if len(hits) >= k or len(rids) < want:
                break
            want *= 4
        gone = len(sim_of) - len(rows)
        hits.sort(key=lambda h: (h.rank, -h.ts, h.message_id))
        return Found(scope.agent_id, hits[:k], max(0, above - gone), dirty, pending)


def fuse(keyword: list[Hit], semantic_hits: list[Hit], keyword_weight: float,
         every_word: frozenset[tuple[str, int]] = frozenset()) -> list[Hit]:
    """Hybrid's fusion of the two ranked lists (rank = minus the fused score): a row's similarity
    scaled to [0, 1] over the semantic list (its best 1, its least 0; the only row of a list of one
    is 1; a row the list lacks 0), plus `keyword_weight` times (its BM25 over the keyword list's
    best) ** KEYWORD_POWER (0 for a row the keyword list lacks, or that holds only words in half the
    rows or more, KEYWORD_EVIDENCE, unless it is in `every_word`: it holds every word of the query).

    Scores, not ranks: reciprocal rank fusion gives a row found both ways twice a semantic-only
    first's score, and a natural question's common words (or, across languages, the answer's
    neighbours in the question's language) match many rows the embedder also finds near; with the
    scores, a keyword match moves a row past the ones its similarity barely trails, and past a
    far better one only when it holds the query's rare words (docs/architecture/decisions.md)."""
    fused: dict[tuple[str, int], Hit] = {}
    score: dict[tuple[str, int], float] = {}
    found: dict[tuple[str, int], list[str]] = {}
    if semantic_hits:
        best, least = -min(h.rank for h in semantic_hits), -max(h.rank for h in semantic_hits)
        spread = best - least
        for hit in semantic_hits:
            key = (hit.agent_id, hit.rid)
            fused[key], found[key] = hit, ["semantic"]
            score[key] = 1.0 if spread <= 0 else (-hit.rank - least) / spread
    keyword = [h for h in keyword if h.rank <= -KEYWORD_EVIDENCE or (h.agent_id, h.rid) in every_word]
    if keyword:
        top = min(h.rank for h in keyword)  # BM25: lower is better, below 0 for a row that matches
        for hit in keyword:
            key = (hit.agent_id, hit.rid)
            fused.setdefault(key, hit)
            found.setdefault(key, []).insert(0, "keyword")
            share = hit.rank / top if top < 0 else 1.0
            score[key] = score.get(key, 0.0) + keyword_weight * share ** KEYWORD_POWER
    out = []
    for key, hit in fused.items():
        hit.rank = -score[key]
        hit.matched_by = tuple(found[key])
        out.append(hit)
    out.sort(key=lambda h: (h.rank, -h.ts, h.message_id))
    return out


def passages(text: str, max_units: int) -> list[tuple[int, int]]:
    """Spans of `text` (whitespace already single spaces) of at most `max_units` UTF-16 units less
    the cut markers, cut between words where one is near."""
    budget = max_units - 4
    spans: list[tuple[int, int]] = []
    start = 0
    while start < len(text):
        end, used = start, 0
        while end < len(text) and used + (2 if ord(text[end]) > 0xFFFF else 1) <= budget:
            used += 2 if ord(text[end]) > 0xFFFF else 1
            end += 1
        if end < len(text):
            space = text.rfind(" ", start, end)
            if space > start + budget // 2:
                end = space
        spans.append((start, end))
        start = end + 1 if end < len(text) and text[end] == " " else end
    return spans


async def nearest_passages(embedder: Embedder, vector: npt.NDArray[np.float32] | None, hits: list[Hit],
                           max_units: int, deadline: float = math.inf) -> None:
    """Set each hit's snippet to the passage of its message nearest the query (one embed call for
    every long message; the message's start where the embedder fails)."""
    cuts: list[tuple[Hit, str, list[tuple[int, int]]]] = []
    for hit in hits:
        text = " ".join(hit.text.split())
        if utf16_len(text) <= max_units:
            hit.snippet = text
        else:
            cuts.append((hit, text, passages(text, max_units)))
    if not cuts:
        return
    best: list[int] = [0] * len(cuts)
    if vector is not None:
        try:
            pieces = [text[a:b] for _, text, spans in cuts for a, b in spans]
            async with asyncio.timeout(embed_wait_s(deadline)):
                sims = (await embedder.embed(pieces)) @ vector
            at = 0
            for i, (_, _, spans) in enumerate(cuts):
                best[i] = int(np.argmax(sims[at:at + len(spans)]))
                at += len(spans)
        except (EmbedderFailed, TimeoutError) as exc:
            log.warning("search.embed_failed", error=str(exc) or "the embedder was too slow for the passages")
    for (hit, text, spans), i in zip(cuts, best):
        a, b = spans[i]
        hit.snippet = ("… " if a > 0 else "") + text[a:b].strip() + (" …" if b < len(text) else "")


def group_sessions(hits: list[Hit], view: CatalogView) -> list[tuple[str, str, int, Hit]]:
    """(agent, session key, hits, best) per session in the ranked list, in the order of their best."""
    groups: dict[tuple[str, str], list[Hit]] = {}
    for hit in hits:
        win = view.agents[hit.agent_id].windows.get(wid_of(hit.rid))
        if win is not None:
            groups.setdefault((hit.agent_id, win.session_key), []).append(hit)
    return [(agent, key, len(found), found[0]) for (agent, key), found in groups.items()]


async def run_meaning(ctx: SearchContext, query: ParsedQuery, req: SearchRequest, scopes: dict[str, Scope],
                      view: CatalogView, versions: dict[str, int] | None, deadline: float) -> Outcome:
    """A `semantic` or `hybrid` query over the scopes, hits or sessions ranked, snippets set;
    raises MetaChanged as run_query does."""
    out = Outcome()
    embedder = await ctx.host.embedder()
    assert embedder is not None  # the engine refuses these modes with the embedder off
    await check_empty_scopes(ctx.catalog, scopes, versions, deadline)
    sessions = req.result_mode == "sessions"
    depth = SESSIONS_DEPTH if sessions else (FUSE_DEPTH if req.mode == "hybrid" else req.limit + 1)
    vector = await query_vector(embedder, query.text, deadline)
    found = (MeaningOutcome(failed=True) if vector is None else
             await semantic(ctx, embedder, vector, req, scopes, versions, deadline, depth))
    for hit in found.hits:
        hit.matched_by = ("semantic",)
    ranked, more = found.hits, found.more
    out.dirty = {a: set(w) for a, w in found.dirty.items()}
    if req.mode == "hybrid":
        async def keyword(q: ParsedQuery) -> Outcome:
            return await run_query(ctx, q, replace(req, limit=depth, mode="keyword", result_mode="messages"),
                                   scopes, versions, deadline, by_newest=False)

        every_word = await keyword(query)
        words = await any_word(keyword, query, every_word)
        for agent_id, wids in words.dirty.items():
            out.dirty.setdefault(agent_id, set()).update(wids)
        holding_all = frozenset((h.agent_id, h.rid) for h in every_word.hits)
        ranked = keep_in_top(fuse(words.hits, found.hits, embedder.keyword_weight, holding_all),
                             every_word.hits[0] if every_word.hits else None)
        more = more or words.more
    out.pending, out.meaning_failed = found.pending, found.failed
    if sessions:
        groups = [SessionGroup(agent, key, n, best) for agent, key, n, best in group_sessions(ranked, view)]
        out.more = more or len(groups) > req.limit
        out.groups = groups[:req.limit]
        await nearest_passages(embedder, vector, [g.best for g in out.groups], ctx.settings.snippet_max_units, deadline)
    else:
        out.more = more or len(ranked) > req.limit
        out.hits = ranked[:req.limit]
        await nearest_passages(embedder, vector, out.hits, ctx.settings.snippet_max_units, deadline)
    return out
