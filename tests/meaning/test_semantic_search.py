"""Search by meaning (SPEC §3 "Meaning index", §4 `mode`), on both stores, with the real builtin
embedder; the embed job runs in the test's process (Engine.embed_pending) or on the embedded
in-process worker."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from sessionsearch import InvalidRequest
from sessionsearch.embed import EmbedderFailed
from sessionsearch.embed.builtin import BuiltinEmbedder
from sessionsearch.engine import Engine
from sessionsearch.protocol import AppendParams, SearchParams, SessionRef, UpsertParams
from sessionsearch.queue import Pipeline
from sessionsearch.search import meaning

from ..helpers import chain, engine_at, ids, leaf, msg, sql_rows, sweeping

KEY = "agent:main:main"
TOPICS = [
    ("user", "We should refinance the mortgage on the house before the rates go up"),
    ("assistant", "The dentist appointment moved to Thursday at nine"),
    ("user", "Pack sunscreen and a swimsuit for the beach trip in July"),
    ("assistant", "My laptop battery drains in two hours, maybe it needs a replacement"),
    ("user", "The quarterly revenue report is due to the board next Friday"),
    ("assistant", "Our cat refuses to eat the new brand of kibble"),
    ("user", "Use zxqvelt as the staging password rotation codename"),
    ("assistant", "Remember to change your password every ninety days"),
    ("user", "A strong password mixes letters, digits and symbols"),
    ("assistant", "The kubernetes pod keeps crashing with an out of memory error"),
]


async def _corpus(engine: Engine, key: str = KEY, prefix: str = "m") -> None:
    await engine.append(AppendParams(sessionKey=key, events=chain(prefix, TOPICS)))
    await engine.embed_pending()


class Renamed:
    """The builtin model under another identity: what changing the configured model looks like."""

    def __init__(self, inner: BuiltinEmbedder, model: str) -> None:
        self.inner, self.model, self.dimensions, self.min_score = inner, model, inner.dimensions, inner.min_score
        self.least_score, self.keyword_weight = inner.least_score, inner.keyword_weight
        self.batch_rows = inner.batch_rows

    async def embed(self, texts):
        return await self.inner.embed(texts)

    async def embed_query(self, text):
        return await self.inner.embed_query(text)

    async def aclose(self) -> None:
        return None


class Failing:
    """An embedder whose endpoint is down."""

    model = "builtin:l2_supercat_256"
    dimensions = 256
    min_score = 0.175
    least_score = 0.16
    keyword_weight = 0.3
    batch_rows = 512

    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, texts):
        self.calls += 1
        raise EmbedderFailed("connection refused by 127.0.0.1:9 (the endpoint is down)")

    async def embed_query(self, text):
        return (await self.embed([text]))[0]

    async def aclose(self) -> None:
        return None


async def test_a_paraphrase_is_found_by_semantic_search_but_not_by_keyword(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine)
        question = "what did we decide about the home loan"
        assert ids(await engine.search(SearchParams(query=question))) == []
        found = await engine.search(SearchParams(query=question, mode="semantic"))
        assert ids(found)[:1] == ["m1"] and "indexing" not in found
        hit = found["results"][0]
        assert hit["matchedBy"] == ["semantic"] and BuiltinEmbedder.load().min_score <= hit["score"] <= 1.0
        assert ids(await engine.search(SearchParams(query="when is my visit to the tooth doctor", mode="semantic")))[:1] == ["m2"]


async def test_an_unrelated_query_finds_nothing_above_the_similarity_floor(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine)
        assert await engine.search(SearchParams(query="quantum chromodynamics gluon flux tensor", mode="semantic")) == {"results": []}
        assert ids(await engine.search(SearchParams(query="anything", mode="semantic", limit=25))) == []


async def test_weak_neighbours_answer_only_near_the_best(backend):
    """Under the floor but over the model's least score: only the rows near the best one answer."""
    async with engine_at(backend) as engine:
        await _corpus(engine)
        found = (await engine.search(SearchParams(query="piano lessons", mode="semantic", limit=25)))["results"]  # best 0.167
        scores = [hit["score"] for hit in found]
        builtin = BuiltinEmbedder.load()
        assert 1 <= len(found) < len(TOPICS) and builtin.least_score <= max(scores) < builtin.min_score
        assert min(scores) >= max(scores) - meaning.NEAR_BEST - 0.01  # int8 scores: within a rounding


async def test_a_floor_no_message_reaches_still_answers_the_nearest(backend):
    async with engine_at(backend, semantic_min_score=0.99) as engine:
        await _corpus(engine)
        found = await engine.search(SearchParams(query="what did we decide about the home loan", mode="semantic"))
        assert ids(found)[:1] == ["m1"] and all(hit["score"] < 0.99 for hit in found["results"])


async def test_hybrid_keeps_a_rare_words_keyword_top_hit_in_its_top_three(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine)
        keyword = await engine.search(SearchParams(query="zxqvelt password"))
        assert ids(keyword) == ["m7"]
        hybrid = await engine.search(SearchParams(query="zxqvelt password", mode="hybrid"))
        assert "m7" in ids(hybrid)[:3]
        by_id = {h["messageId"]: h for h in hybrid["results"]}
        assert by_id["m7"]["matchedBy"] == ["keyword", "semantic"]
        # found both ways, and holding the rare word, ranks first; the rows holding only "password"
        # were found by words too (hybrid's keyword half holds any of the query's words)
        assert ids(hybrid)[0] == "m7"
        assert {h["messageId"] for h in hybrid["results"] if "keyword" in h["matchedBy"]} == {"m7", "m8", "m9"}


async def test_hybrid_hits_found_only_by_words_say_keyword(backend, monkeypatch):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "ticket ABC-1234 was closed"),
                                             ("assistant", "lunch was pasta with tomato sauce")])))
        await engine.embed_pending()
        engine.settings = engine.settings.replace(semantic_min_score=0.99)  # no neighbour is that close
        monkeypatch.setattr(meaning, "NEAR_BEST", -math.inf)  # and none is near enough the best one
        hybrid = await engine.search(SearchParams(query="ABC-1234", mode="hybrid"))
        assert [(h["messageId"], h["matchedBy"]) for h in hybrid["results"]] == [("m1", ["keyword"])]


async def test_role_time_and_limit_narrow_semantic_search(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine)
        question = "password rules"
        every = ids(await engine.search(SearchParams(query=question, mode="semantic", limit=25)))
        assert {"m8", "m9"} <= set(every)
        users = ids(await engine.search(SearchParams(query=question, mode="semantic", role="user", limit=25)))
        assert "m8" not in users and "m9" in users
        one = await engine.search(SearchParams(query=question, mode="semantic", limit=1))
        assert len(one["results"]) == 1 and one["truncated"] is True
        stamps = {h["messageId"]: h["timestamp"] for h in
                  (await engine.search(SearchParams(query=question, mode="semantic", limit=25)))["results"]}
        later = ids(await engine.search(SearchParams(query=question, mode="semantic", since=stamps["m9"], limit=25)))
        assert "m9" in later and "m8" not in later


async def test_pending_rows_answer_indexing_until_the_embedded_worker_embeds_them(backend):
    settings = backend.settings()
    pipeline = Pipeline(settings)
    try:
        async with Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue) as engine:
            await engine.append(AppendParams(sessionKey=KEY, events=chain("m", TOPICS)))
            first = await engine.search(SearchParams(query="home loan", mode="semantic"), agent_facing=True)
            assert first["indexing"] is True and first["results"] == [] and "warning" in first
            status = (await engine.index_status())["agents"][0]
            assert status["embeddingBacklog"] == len(TOPICS) and status["embeddedMessages"] == 0
            await engine.search(SearchParams(query="home loan", mode="semantic"))  # queued once: the marker holds it
            assert pipeline.broker.queues["embed"].qsize() == 1
            pipeline.start_embedded_worker()
            pipeline.broker.join("embed", timeout=60_000)
            assert pipeline.worker is not None
            pipeline.worker.join()
            done = await engine.search(SearchParams(query="home loan", mode="semantic"))
            assert ids(done)[:1] == ["m1"] and "indexing" not in done
            status = (await engine.index_status())["agents"][0]
            assert status["embeddingBacklog"] == 0 and status["embeddedMessages"] == len(TOPICS)
    finally:
        pipeline.close()


async def test_an_append_never_waits_for_an_embedding_and_its_rows_wait_as_pending(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine)
        appended = await engine.append(AppendParams(sessionKey=KEY, events=[msg("n1", "user", "the escrow account for the house closing", "m10")]))
        assert appended["indexed"] == 1
        during = await engine.search(SearchParams(query="home loan", mode="semantic"))
        assert during["indexing"] is True and ids(during)[:1] == ["m1"]  # what is embedded answers meanwhile
        await engine.embed_pending()
        assert "indexing" not in await engine.search(SearchParams(query="home loan", mode="semantic"))


async def test_rewound_away_text_never_answers_a_semantic_search(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "which bank for the home loan?"),
                                             ("assistant", "We will refinance the mortgage with the credit union"),
                                             ("user", "ok, go with it")])))
        await engine.embed_pending()
        assert "m2" in ids(await engine.search(SearchParams(query="mortgage refinancing", mode="semantic")))
        await engine.append(AppendParams(sessionKey=KEY, events=[leaf("l1", "m3", "m1"), msg("n1", "assistant", "Let us compare the bakeries in town for fresh bread", "l1")]))
        during = await engine.search(SearchParams(query="mortgage refinancing", mode="semantic"))
        assert "m2" not in ids(during) and during["indexing"] is True
        await engine.reconcile_pending()
        after = await engine.search(SearchParams(query="mortgage refinancing", mode="semantic"))
        assert "m2" not in ids(after) and "m3" not in ids(after)
        await engine.embed_pending()
        final = await engine.search(SearchParams(query="mortgage refinancing", mode="semantic", limit=25))
        assert "m2" not in ids(final) and "indexing" not in final
        assert ids(await engine.search(SearchParams(query="which bakery sells the best bread", mode="semantic")))[:1] == ["n1"]


async def test_deleted_incognito_and_archived_sessions_never_answer(backend):
    async with engine_at(backend) as engine:
        for n, key in enumerate(["agent:main:gone", "agent:main:secret", "agent:main:cold", "agent:main:kept"]):
            await engine.append(AppendParams(sessionKey=key, events=chain(f"k{n}-", [("user", "We should refinance the mortgage on the house")])))
        await engine.upsert_session(UpsertParams(sessionKey="agent:main:secret", incognito=True))
        await engine.embed_pending()
        everything = await engine.search(SearchParams(query="home loan", mode="semantic", limit=25))
        assert sorted(h["sessionKey"] for h in everything["results"]) == [
            "agent:main:cold", "agent:main:gone", "agent:main:kept"]
        await engine.delete(SessionRef(sessionKey="agent:main:gone"))
        await engine.archive(SessionRef(sessionKey="agent:main:cold"))
        found = await engine.search(SearchParams(query="home loan", mode="semantic", limit=25))
        assert [h["sessionKey"] for h in found["results"]] == ["agent:main:kept"]
        assert found["archivedTranscriptsExcluded"] == 1
        store = await engine.store("main")
        left = await sql_rows(store, "SELECT count(*) FROM embeddings", "SELECT count(*) FROM ss_embeddings")
        # the deleted and archived sessions' embeddings went with their rows; the incognito one's
        # text was never embedded
        assert left == [(1,)]


async def test_visibility_rules_hold_for_semantic_search(backend):
    async with engine_at(backend, visibility="self") as engine:
        await _corpus(engine, "agent:main:a", "a")
        await _corpus(engine, "agent:main:b", "b")
        await _corpus(engine, "agent:ops:main", "o")
        own = await engine.search(SearchParams(query="home loan", mode="semantic", requester={"sessionKey": "agent:main:a"}, limit=25))
        assert {h["sessionKey"] for h in own["results"]} == {"agent:main:a"}
        operator = await engine.search(SearchParams(query="home loan", mode="hybrid", limit=25))
        assert {h["sessionKey"] for h in operator["results"]} == {"agent:main:a", "agent:main:b", "agent:ops:main"}
        with pytest.raises(Exception) as denied:
            await engine.search(SearchParams(query="home loan", mode="semantic", sessionKeys=["agent:main:b"], requester={"sessionKey": "agent:main:a"}))
        assert type(denied.value).__name__ == "Forbidden"


async def test_a_model_change_makes_embeddings_stale_until_they_are_made_again(backend):
    builtin = BuiltinEmbedder.load()
    async with engine_at(backend) as engine:
        await _corpus(engine)
    settings = backend.settings()
    async with Engine(settings=settings, embedder=Renamed(builtin, "builtin:renamed_256")) as engine:
        stale = await engine.search(SearchParams(query="home loan", mode="semantic"))
        assert stale == {"results": [], "indexing": True}  # nothing of the new model yet
        status = (await engine.index_status())["agents"][0]
        assert status["embeddedMessages"] == 0 and status["embeddingBacklog"] == len(TOPICS)
        await engine.embed_pending()
        fresh = await engine.search(SearchParams(query="home loan", mode="semantic"))
        assert ids(fresh)[:1] == ["m1"] and "indexing" not in fresh


async def test_resultmode_sessions_groups_semantic_hits_by_session(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine, "agent:main:a", "a")
        await engine.append(AppendParams(sessionKey="agent:main:b", events=chain("b", [("user", "the mortgage broker called back"),
                                                        ("assistant", "home loan paperwork is signed")])))
        await engine.embed_pending()
        found = await engine.search(SearchParams(query="home loan mortgage", mode="semantic", resultMode="sessions"))
        keys = [s["sessionKey"] for s in found["results"]]
        assert sorted(keys) == ["agent:main:a", "agent:main:b"]
        b = next(s for s in found["results"] if s["sessionKey"] == "agent:main:b")
        assert b["hits"] == 2 and b["best"]["matchedBy"] == ["semantic"]


async def test_the_snippet_of_a_long_message_is_its_passage_nearest_the_query(backend):
    filler = " ".join(["The committee reviewed the gardening schedule for spring."] * 3)
    text = f"{filler} Separately, we agreed to refinance the mortgage on the house with a fixed rate. {filler}"
    # a long message's one embedding is its words' mean, diluted by the rest: a low floor lets it answer
    async with engine_at(backend, semantic_min_score=0.1) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", text)])))
        await engine.embed_pending()
        hit = (await engine.search(SearchParams(query="home loan refinance mortgage", mode="semantic")))["results"][0]
        assert "mortgage" in hit["snippet"] and len(hit["snippet"]) <= 300
        assert hit["snippet"].startswith("… ") or hit["snippet"].endswith(" …")


async def test_mode_errors_name_what_is_wrong(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine)
        with pytest.raises(InvalidRequest, match='order "recent" needs mode "keyword"'):
            await engine.search(SearchParams(query="loan", mode="semantic", order="recent"))
        with pytest.raises(InvalidRequest, match='order "recent" needs mode "keyword"'):
            await engine.search(SearchParams(query="loan", mode="hybrid", order="recent"))
        with pytest.raises(InvalidRequest, match="mode") as bad:
            await engine.search(SearchParams(query="loan", mode="vector"))
        assert bad.value.field == "mode"
        assert ids(await engine.search(SearchParams(query="mortgage", mode="keyword"))) == ["m1"]


async def test_with_the_embedder_off_semantic_search_is_disabled(backend):
    async with engine_at(backend, embedder="none") as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", TOPICS)))
        for mode in ("semantic", "hybrid"):
            with pytest.raises(InvalidRequest, match="semantic search is disabled"):
                await engine.search(SearchParams(query="home loan", mode=mode))
        assert ids(await engine.search(SearchParams(query="mortgage"))) == ["m1"]
        assert (await engine.index_status())["agents"][0]["embeddedMessages"] == 0


async def test_a_failing_embedder_leaves_keyword_hits_in_hybrid_and_stores_nothing(backend):
    failing = Failing()
    async with Engine(settings=backend.settings(), embedder=failing) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", TOPICS)))
        with pytest.raises(EmbedderFailed):
            await engine.embed("main", 1)
        found = await engine.search(SearchParams(query="mortgage", mode="hybrid"))
        assert ids(found) == ["m1"] and found["indexing"] is True
        assert found["results"][0]["matchedBy"] == ["keyword"]
        semantic = await engine.search(SearchParams(query="mortgage", mode="semantic"))
        assert semantic == {"results": [], "indexing": True}
        store = await engine.store("main")
        assert await sql_rows(store, "SELECT count(*) FROM embeddings",
                              "SELECT count(*) FROM ss_embeddings") == [(0,)]
        # the claim was released: a job with a working embedder takes the window at once
    async with engine_at(backend) as engine:
        assert (await engine.embed("main", 1)).outcome == "embedded"


async def test_stored_vectors_keep_the_float_neighbours(backend):
    """int8 with a per-row scale keeps the exact float order of clearly separated neighbours."""
    builtin = BuiltinEmbedder.load()
    async with engine_at(backend) as engine:
        await _corpus(engine)
        query = "computer power problem"
        exact = (await builtin.embed([t for _, t in TOPICS])) @ (await builtin.embed([query]))[0]
        best = float(exact.max())
        floor = min(builtin.min_score, best - meaning.NEAR_BEST) if best >= builtin.least_score else builtin.min_score
        expected = [f"m{i + 1}" for i in np.argsort(-exact) if exact[i] >= floor]
        found = await engine.search(SearchParams(query=query, mode="semantic", limit=25))
        assert ids(found) == expected
        assert all(abs(h["score"] - exact[int(h["messageId"][1:]) - 1]) < 0.02 for h in found["results"])


def test_the_embed_job_is_deduplicated_across_searches(backend):
    settings = backend.settings()
    pipeline = Pipeline(settings)

    async def run():
        async with Engine(settings=settings, enqueuer=pipeline.reconciler.enqueue) as engine:
            await engine.append(AppendParams(sessionKey=KEY, events=chain("m", TOPICS)))
            await asyncio.gather(*(engine.search(SearchParams(query="home loan", mode="hybrid")) for _ in range(5)))
            assert pipeline.broker.queues["embed"].qsize() == 1

    try:
        asyncio.run(run())
    finally:
        pipeline.close()


async def test_one_embed_job_takes_the_small_windows_waiting_beside_its_own(backend):
    async with engine_at(backend) as engine:
        for n in range(5):
            await engine.append(AppendParams(sessionKey=f"agent:main:s{n}", events=chain(f"s{n}-", TOPICS[:3])))
        first = await engine.embed("main", 1)
        assert (first.outcome, first.rows) == ("embedded", 15)
        assert (await engine.index_status())["agents"][0]["embeddingBacklog"] == 0
        assert (await engine.embed("main", 3)).outcome == "clean"  # its own job finds it done
        found = await engine.search(SearchParams(query="home loan", mode="semantic", limit=25))
        assert sorted(ids(found)) == [f"s{n}-1" for n in range(5)] and "indexing" not in found


async def test_a_workers_startup_sweep_queues_the_embed_backlog_once(backend):
    settings = backend.settings()
    async with sweeping(settings) as (pipeline, sweeper):
        async with engine_at(backend) as engine:
            await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", TOPICS[:2])))
            await engine.append(AppendParams(sessionKey="agent:main:b", events=chain("b", TOPICS[2:4])))
        assert (await sweeper.startup())["embedWindows"] == 2
        assert pipeline.broker.queues["embed"].qsize() == 2
        await sweeper.startup()  # queued already: the markers hold them
        assert pipeline.broker.queues["embed"].qsize() == 2


async def test_a_periodic_sweep_sends_the_embed_jobs_of_live_appends(backend):
    """Rows appended live wait for embeddings with no job sent; the next periodic sweep sends one
    a window, and no more while those wait."""
    settings = backend.settings()
    async with sweeping(settings) as (pipeline, sweeper):
        async with engine_at(backend) as engine:
            await engine.append(AppendParams(sessionKey="agent:main:a", events=chain("a", TOPICS[:2])))
            assert (await sweeper.periodic())["embedWindows"] == 1
            assert pipeline.broker.queues["embed"].qsize() == 1
            await engine.append(AppendParams(sessionKey="agent:main:b", events=chain("b", TOPICS[2:4])))
            assert (await sweeper.periodic())["embedWindows"] == 2
            assert pipeline.broker.queues["embed"].qsize() == 2  # a's job still waits: not sent again
            assert (await engine.embed("main", 1)).outcome == "embedded"
