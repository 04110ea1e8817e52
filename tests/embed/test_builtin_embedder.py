"""The builtin embedder: WordLlama's vectors from the wheel, unit rows, any text."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from sessionsearch import Settings
from sessionsearch.embed import TEXT_MAX_CHARS, open_embedder
from sessionsearch.embed.builtin import BuiltinEmbedder


@pytest.fixture(scope="module")
def model() -> BuiltinEmbedder:
    e = open_embedder(Settings())
    assert isinstance(e, BuiltinEmbedder)
    return e


def test_rows_are_unit_float32_of_256_dimensions(model):
    vectors = model.embed_now(["we refinanced the mortgage", "the deploy failed", "ok"])
    assert vectors.shape == (3, 256) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert model.model == "builtin:l2_supercat_256" and model.dimensions == 256


def test_empty_and_blank_texts_are_zero_rows_beside_real_ones(model):
    vectors = model.embed_now(["", "hello there", "   \n\t ", "general kenobi"])
    assert not vectors[0].any() and not vectors[2].any()
    assert np.allclose(np.linalg.norm(vectors[[1, 3]], axis=1), 1, atol=1e-5)
    assert model.embed_now([]).shape == (0, 256)
    assert not model.embed_now(["", ""]).any()


def test_a_text_embeds_the_same_alone_or_in_any_batch(model):
    texts = [f"note {i}: the {['budget', 'deploy', 'recipe'][i % 3]} " + "detail " * (i * 37 % 500)
             for i in range(300)]
    together = model.embed_now(texts)
    assert np.allclose(together, model.embed_now(texts), atol=0)  # the same run twice: the same bits
    alone = np.vstack([model.embed_now([t]) for t in texts[::29]])
    assert np.allclose(together[::29], alone, atol=1e-6)


def test_runs_of_whitespace_do_not_change_a_vector(model):
    a, b = model.embed_now(["the mortgage rate went down", "  the   mortgage\n\nrate\twent down  "])
    assert np.allclose(a, b, atol=1e-6)


def test_a_text_of_any_length_is_embedded_from_its_start(model):
    start = "the quarterly budget review moved to thursday. "
    long = start * (TEXT_MAX_CHARS // len(start)) + "completely different words about sailing boats " * 50_000
    cut = long[:TEXT_MAX_CHARS]
    vectors = model.embed_now([long, cut, "short"])
    assert np.allclose(vectors[0], vectors[1], atol=1e-6)
    assert float(vectors[0] @ model.embed_now([start])[0]) > 0.9


def test_a_paraphrase_is_nearer_than_unrelated_messages(model):
    question = "what did we decide about the home loan?"
    messages = ["We agreed to refinance the mortgage with the credit union at a fixed rate.",
                "The staging cluster ran out of disk during the nightly backup.",
                "Remember to water the tomatoes and basil on the balcony.",
                "The conference talk slides need a new title and a shorter intro."]
    q = model.embed_now([question])[0]
    scores = model.embed_now(messages) @ q
    assert int(np.argmax(scores)) == 0
    assert scores[0] - max(scores[1:]) > 0.05


async def test_embed_runs_off_the_event_loop_and_agrees(model):
    texts = ["async path", "same vectors"]
    assert np.array_equal(await model.embed(texts), model.embed_now(texts))


def test_loading_leaves_the_process_logging_alone():
    # in a fresh process: the library's import is what would configure the root logger
    probe = ("import logging; r = logging.getLogger(); before = (list(r.handlers), r.level); "
             "from sessionsearch.embed.builtin import BuiltinEmbedder; BuiltinEmbedder.load(); "
             "print((list(r.handlers), r.level) == before)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True", out.stderr


def test_the_embedder_none_is_no_embedder():
    assert open_embedder(Settings(embedder="none")) is None


def test_a_batch_of_thousands_embeds_as_its_parts_do(model):
    texts = [f"message {i} on {['billing', 'the roadmap', 'a flaky test'][i % 4]}" if i % 4 < 3 else ""
             for i in range(2500)]
    whole = model.embed_now(texts)
    parts = np.vstack([model.embed_now(texts[i:i + 100]) for i in range(0, 2500, 100)])
    assert whole.shape == (2500, 256) and np.allclose(whole, parts, atol=1e-6)
    assert not whole[3::4].any()
