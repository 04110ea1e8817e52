"""The openai embedder against a real OpenAI-compatible endpoint on loopback (tests/embed/endpoint.py):
batches, the key, retries, and every way an answer can be wrong, each an EmbedderFailed that says
what the endpoint did."""

from __future__ import annotations

import asyncio
import json
import socket

import numpy as np
import pytest

from sessionsearch import Settings
from sessionsearch.embed import EmbedderFailed, check_settings, open_embedder
from sessionsearch.embed.openai import OpenAIEmbedder
from sessionsearch.errors import InvalidRequest

from .endpoint import EmbeddingsEndpoint, Fault, builtin, self_signed

TEXTS = ["we refinanced the mortgage", "the deploy failed on staging", "lunch at noon?"]


@pytest.fixture
def endpoint():
    with EmbeddingsEndpoint() as e:
        yield e


def embedder(url: str, **kw) -> OpenAIEmbedder:
    return OpenAIEmbedder(**{"url": url, "model_name": "nomic-embed-text", "dimensions": 256, "backoff_s": 0.01,
                             **kw})


async def test_vectors_are_the_endpoints_as_unit_rows_in_input_order(endpoint):
    e = embedder(endpoint.url)
    vectors = await e.embed(TEXTS)
    assert vectors.shape == (3, 256) and vectors.dtype == np.float32
    assert np.allclose(vectors, builtin().embed_now(TEXTS), atol=1e-6)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert endpoint.seen[0].body == {"model": "nomic-embed-text", "input": TEXTS, "dimensions": 256}
    assert (e.dimensions, e.model) == (256, "openai:nomic-embed-text:256")


async def test_an_answer_of_other_dimensions_fails_naming_the_setting(endpoint):
    e = embedder(endpoint.url)
    await e.embed(["one"])
    endpoint.faults.append(Fault("dims", dims=128))
    with pytest.raises(EmbedderFailed, match=r"answered vectors of 128 dimensions, not 256 \(search.embedderDimensions\)"):
        await e.embed(["two"])


async def test_an_endpoint_refusing_the_dimensions_field_is_asked_without_it_from_then_on():
    with EmbeddingsEndpoint(refuses_dimensions=True) as endpoint:
        e = embedder(endpoint.url, attempts=1)
        first = await e.embed(TEXTS)
        await e.embed(["later"])
        assert ["dimensions" in s.body for s in endpoint.seen] == [True, False, False]
    assert np.allclose(first, builtin().embed_now(TEXTS), atol=1e-6)


async def test_a_refused_request_without_the_dimensions_field_is_not_asked_again(endpoint):
    endpoint.faults.append(Fault("status", status=400, body='{"error": "invalid dimensions"}'))
    endpoint.faults.append(Fault("status", status=400, body='{"error": "input too long for this dimension"}'))
    with pytest.raises(EmbedderFailed, match="HTTP 400: .*too long"):
        await embedder(endpoint.url).embed(TEXTS)
    assert len(endpoint.seen) == 2


async def test_texts_go_in_batches_of_the_configured_size(endpoint):
    e = embedder(endpoint.url, batch_texts=4)
    texts = [f"message number {i} about the quarterly budget" for i in range(10)]
    vectors = await e.embed(texts)
    assert [len(s.body["input"]) for s in endpoint.seen] == [4, 4, 2]
    assert np.allclose(vectors, builtin().embed_now(texts), atol=1e-6)


async def test_the_key_goes_as_a_bearer_header_and_nowhere_else(endpoint):
    key = "sk-test-7f3a9c"
    endpoint.faults.append(Fault("status", status=401, body=f'{{"error": "bad key {key}"}}'))
    e = embedder(endpoint.url, api_key=key)
    with pytest.raises(EmbedderFailed) as failed:
        await e.embed(TEXTS)
    assert endpoint.seen[0].headers["authorization"] == f"Bearer {key}"
    assert key not in str(failed.value) and "***" in str(failed.value)
    assert key not in repr(e)
    no_key = embedder(endpoint.url)
    await no_key.embed(TEXTS)
    assert "authorization" not in endpoint.seen[1].headers


async def test_every_answer_is_held_to_the_dimensions_setting(endpoint):
    wrong = embedder(endpoint.url, dimensions=768)
    with pytest.raises(EmbedderFailed, match=r"answered vectors of 256 dimensions, not 768"):
        await wrong.embed(TEXTS)
    assert endpoint.seen[0].body["dimensions"] == 768


async def test_a_client_error_is_not_retried_and_its_body_is_shown(endpoint):
    endpoint.faults.append(Fault("status", status=400, body='{"error": "model \\"nomic\\" not found, try pulling it"}'))
    with pytest.raises(EmbedderFailed, match=r"answered HTTP 400: .*not found, try pulling it") as failed:
        await embedder(endpoint.url, attempts=4).embed(TEXTS)
    assert len(endpoint.seen) == 1
    assert endpoint.url in str(failed.value)


async def test_a_long_error_body_is_cut_short_in_the_message(endpoint):
    endpoint.faults.append(Fault("status", status=422, body="x" * 100_000))
    with pytest.raises(EmbedderFailed) as failed:
        await embedder(endpoint.url).embed(TEXTS)
    assert "HTTP 422" in str(failed.value) and len(str(failed.value)) < 400


async def test_server_errors_and_429_are_retried_until_an_answer(endpoint):
    endpoint.faults.extend([Fault("status", status=500, body="oops"), Fault("status", status=429, body="slow down"),
                            Fault("status", status=503, body="loading model")])
    vectors = await embedder(endpoint.url, attempts=4).embed(TEXTS)
    assert len(endpoint.seen) == 4
    assert np.allclose(vectors, builtin().embed_now(TEXTS), atol=1e-6)


async def test_retries_are_bounded_and_the_last_failure_is_named(endpoint):
    endpoint.faults.extend([Fault("status", status=500, body="oops")] * 5)
    with pytest.raises(EmbedderFailed, match=r"HTTP 500: 'oops' \(after 3 attempts\)"):
        await embedder(endpoint.url, attempts=3).embed(TEXTS)
    assert len(endpoint.seen) == 3


async def test_an_endpoint_that_is_down_fails_naming_its_url():
    with socket.socket() as s:  # a port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(EmbedderFailed, match=r"embedder http://127\.0\.0\.1:\d+/v1/embeddings unreachable: "
                                             r"ConnectionRefusedError.*after 2 attempts"):
        await embedder(url, attempts=2).embed(TEXTS)


async def test_a_slow_endpoint_fails_saying_it_timed_out(endpoint):
    endpoint.faults.append(Fault("sleep", seconds=30))
    with pytest.raises(EmbedderFailed, match=r"/v1/embeddings timed out after 1.5 s \(after 1 attempt\)"):
        await embedder(endpoint.url, timeout_s=1.5, attempts=1).embed(TEXTS)


async def test_a_slow_answer_is_retried_and_the_next_one_used(endpoint):
    endpoint.faults.append(Fault("sleep", seconds=30))
    vectors = await embedder(endpoint.url, timeout_s=3, attempts=2).embed(TEXTS)
    assert vectors.shape == (3, 256) and len(endpoint.seen) == 2


async def test_a_dropped_connection_is_retried(endpoint):
    endpoint.faults.append(Fault("drop"))
    vectors = await embedder(endpoint.url, attempts=2).embed(TEXTS)
    assert vectors.shape == (3, 256) and len(endpoint.seen) == 2


async def test_nan_in_an_answer_fails_and_returns_nothing(endpoint):
    endpoint.faults.append(Fault("nan"))
    with pytest.raises(EmbedderFailed, match="not finite numbers"):
        await embedder(endpoint.url).embed(TEXTS)
    assert len(endpoint.seen) == 1  # a wrong answer is no reason to ask again


async def test_a_body_over_the_cap_is_refused_unread(endpoint):
    endpoint.faults.append(Fault("huge_declared", size=10 * 1024 * 1024))
    with pytest.raises(EmbedderFailed, match=r"a body over 1,048,576 bytes"):
        await embedder(endpoint.url, max_body_bytes=1024 * 1024).embed(TEXTS)


async def test_a_chunked_body_growing_past_the_cap_is_cut_off(endpoint):
    endpoint.faults.append(Fault("huge_chunked", size=8 * 1024 * 1024))
    with pytest.raises(EmbedderFailed, match=r"a body over 1,048,576 bytes"):
        await embedder(endpoint.url, max_body_bytes=1024 * 1024).embed(TEXTS)


async def test_a_chunked_answer_is_read_whole():
    with EmbeddingsEndpoint(chunked=True) as endpoint:
        texts = [f"a longer message {i} so the answer spans many chunks" for i in range(40)]
        vectors = await embedder(endpoint.url).embed(texts)
    assert np.allclose(vectors, builtin().embed_now(texts), atol=1e-6)


async def test_an_integer_too_large_for_a_float_fails_and_returns_nothing(endpoint):
    huge = "1" + "0" * 400  # valid JSON, under the interpreter's digit limit, past a float's range
    rest = ", 0.5" * 255
    endpoint.faults.append(Fault("replace", body=f'{{"data": [{{"index": 0, "embedding": [{huge}{rest}]}}]}}'))
    with pytest.raises(EmbedderFailed, match="answered a number too large for a float"):
        await embedder(endpoint.url).embed(["one"])


async def test_json_nested_past_the_parsers_depth_fails_saying_it_is_no_json(endpoint):
    endpoint.faults.append(Fault("replace", body="[" * 200_000 + "]" * 200_000))
    with pytest.raises(EmbedderFailed, match=r"answered no JSON: b'\[\[\["):
        await embedder(endpoint.url).embed(["one"])


async def test_a_negative_content_length_is_no_valid_http_and_is_retried(endpoint):
    endpoint.faults.append(Fault("raw", body="HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                             "Content-Length: -1\r\n\r\n{}"))
    vectors = await embedder(endpoint.url).embed(TEXTS)  # the second try is answered well
    assert vectors.shape == (3, 256) and len(endpoint.seen) == 2
    endpoint.faults.extend([Fault("raw", body="HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}")] * 2)
    with pytest.raises(EmbedderFailed, match=r"answered no valid HTTP: .*\(after 2 attempts\)"):
        await embedder(endpoint.url, attempts=2).embed(TEXTS)


async def test_header_lines_without_end_are_cut_off_within_a_bounded_memory(endpoint):
    import tracemalloc

    endpoint.faults.append(Fault("endless_headers"))
    tracemalloc.start()
    try:
        with pytest.raises(EmbedderFailed, match="answered no valid HTTP"):
            await embedder(endpoint.url, attempts=1).embed(["one"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024  # the header block's bound, not the 256 MB the endpoint would send


async def test_an_answer_echoing_the_request_headers_never_shows_the_key(endpoint, capsys):
    echoed = Fault("status", status=503, body="Authorization: Bearer sk-secret-1")
    endpoint.faults.extend([Fault("echo"), echoed, echoed])
    with pytest.raises(EmbedderFailed) as failed:
        await embedder(endpoint.url, api_key="sk-secret-1").embed(["one"])
    assert "answered no JSON" in str(failed.value) and "***" in str(failed.value)
    assert endpoint.seen[0].headers["authorization"] == "Bearer sk-secret-1"  # it was sent, and echoed
    with pytest.raises(EmbedderFailed) as failed:
        await embedder(endpoint.url, api_key="sk-secret-1", attempts=2).embed(["two"])
    logged = capsys.readouterr()
    assert "sk-secret-1" not in str(failed.value) + logged.out + logged.err


async def test_vectors_are_put_back_in_index_order(endpoint):
    endpoint.faults.append(Fault("shuffle"))
    vectors = await embedder(endpoint.url).embed(TEXTS)
    assert np.allclose(vectors, builtin().embed_now(TEXTS), atol=1e-6)


async def test_fewer_vectors_than_inputs_fails(endpoint):
    endpoint.faults.append(Fault("fewer"))
    with pytest.raises(EmbedderFailed, match="answered 2 vectors for 3 inputs"):
        await embedder(endpoint.url).embed(TEXTS)


async def test_an_answer_that_is_not_json_fails(endpoint):
    endpoint.faults.append(Fault("garbage"))
    with pytest.raises(EmbedderFailed, match=r"answered no JSON: b'<html>gateway"):
        await embedder(endpoint.url).embed(TEXTS)


async def test_a_url_ending_in_v1_or_in_the_route_reaches_the_route(endpoint):
    for url in (endpoint.url + "/v1", endpoint.url + "/v1/embeddings", endpoint.url + "/"):
        await embedder(url).embed(["x"])
    assert len(endpoint.seen) == 3 and all(s.body["input"] == ["x"] for s in endpoint.seen)


async def test_no_texts_make_no_request(endpoint):
    assert (await embedder(endpoint.url).embed([])).shape == (0, 256)
    assert endpoint.seen == []


async def test_a_very_long_text_is_cut_before_it_is_sent(endpoint):
    await embedder(endpoint.url).embed(["word " * 100_000])
    assert len(endpoint.seen[0].body["input"][0]) == 4096


async def test_the_settings_open_the_openai_embedder(endpoint):
    settings = Settings(embedder="openai", embedder_url=endpoint.url, embedder_model="m", embedder_dimensions=256,
                        embedder_api_key="sk-secret", embedder_batch_texts=2)
    e = open_embedder(settings)
    assert isinstance(e, OpenAIEmbedder) and e.model == "openai:m:256"
    assert (await e.embed(TEXTS)).shape == (3, 256) and len(endpoint.seen) == 2
    assert "sk-secret" not in repr(settings)


@pytest.mark.parametrize("missing", ["embedder_url", "embedder_model", "embedder_dimensions"])
def test_openai_without_its_url_model_or_dimensions_is_a_settings_error_naming_it(missing):
    values = {"embedder_url": "http://127.0.0.1:11434", "embedder_model": "nomic-embed-text",
              "embedder_dimensions": 768, missing: None}
    toml = {"embedder_url": "search.embedderUrl", "embedder_model": "search.embedderModel",
            "embedder_dimensions": "search.embedderDimensions"}[missing]
    with pytest.raises(InvalidRequest, match=rf"needs {toml} \(SESSIONSEARCH_{missing.upper()}\)"):
        open_embedder(Settings(embedder="openai", **values))


def test_a_url_that_is_not_http_is_a_settings_error():
    with pytest.raises(InvalidRequest, match="search.embedderUrl: embedder URL must be http"):
        open_embedder(Settings(embedder="openai", embedder_url="localhost:11434", embedder_model="m",
                               embedder_dimensions=768))


async def test_an_embedding_of_strings_or_nulls_is_refused(endpoint):
    for bad in (["0.1", 0.2], [None, 0.2], [True, 0.2], [[0.1], 0.2]):
        endpoint.faults.append(Fault("replace", body=json.dumps({"data": [{"index": 0, "embedding": bad}]})))
        with pytest.raises(EmbedderFailed, match="not a list of numbers"):
            await embedder(endpoint.url).embed(["one"])


async def test_an_answer_without_a_data_list_is_refused(endpoint):
    for bad in ('{"error": "overloaded"}', "[1, 2]", '{"data": [1, 2, 3]}'):
        endpoint.faults.append(Fault("replace", body=bad))
        with pytest.raises(EmbedderFailed, match="no `data` list of objects"):
            await embedder(endpoint.url).embed(TEXTS)


async def test_indexes_that_are_not_each_input_once_are_refused(endpoint):
    endpoint.faults.append(Fault("replace", body=json.dumps(
        {"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 0, "embedding": [0.0, 1.0]}]})))
    with pytest.raises(EmbedderFailed, match=r"indexes that are not 0\.\.1 once each"):
        await embedder(endpoint.url).embed(["a", "b"])


async def test_a_cancelled_request_leaves_the_embedder_usable(endpoint):
    endpoint.faults.append(Fault("sleep", seconds=30))
    e = embedder(endpoint.url)
    task = asyncio.ensure_future(e.embed(TEXTS))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await e.embed(TEXTS)).shape == (3, 256)


async def test_https_reaches_an_endpoint_whose_certificate_is_trusted(tmp_path, monkeypatch):
    cert, context = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # what the default context trusts, read when it is made
    with EmbeddingsEndpoint(tls=context) as endpoint:
        vectors = await embedder(endpoint.url, api_key="sk-tls").embed(TEXTS)
        assert endpoint.seen[0].headers["authorization"] == "Bearer sk-tls"
    assert np.allclose(vectors, builtin().embed_now(TEXTS), atol=1e-6)


async def test_an_untrusted_certificate_fails_at_once_saying_so(tmp_path):
    _, context = self_signed(tmp_path)
    with EmbeddingsEndpoint(tls=context) as endpoint:
        with pytest.raises(EmbedderFailed, match="has a certificate this host does not trust: self.signed"):
            await embedder(endpoint.url, attempts=3).embed(TEXTS)
        assert endpoint.seen == []


def test_the_toml_file_and_the_environment_configure_the_openai_embedder(tmp_path):
    config = tmp_path / "sessionsearch.toml"
    config.write_text('[search]\nembedder = "openai"\nembedderUrl = "http://127.0.0.1:11434"\n'
                      'embedderModel = "nomic-embed-text"\nembedderDimensions = 768\nembedderBatchTexts = 16\n'
                      'embedderTimeoutS = 5\nembedderAttempts = 2\n')
    settings = Settings.load(config=str(config), env={"SESSIONSEARCH_EMBEDDER_API_KEY": "sk-from-env"})
    e = open_embedder(settings)
    assert isinstance(e, OpenAIEmbedder)
    assert (e.url, e.model, e.batch_texts, e.timeout_s, e.attempts) == (
        "http://127.0.0.1:11434/v1/embeddings", "openai:nomic-embed-text:768", 16, 5.0, 2)
    assert "sk-from-env" not in repr(settings) and "sk-from-env" not in repr(e)


def test_credentials_in_the_url_stay_out_of_its_name(endpoint):
    port = endpoint.url.rsplit(":", 1)[1]
    e = embedder(f"http://user:hunter2@127.0.0.1:{port}/v1")
    assert e.url == f"http://127.0.0.1:{port}/v1/embeddings" and "hunter2" not in repr(e)


def test_a_key_that_cannot_be_a_header_is_a_settings_error_that_does_not_show_it():
    with pytest.raises(InvalidRequest, match="SESSIONSEARCH_EMBEDDER_API_KEY: .*printable ASCII") as failed:
        open_embedder(Settings(embedder="openai", embedder_url="http://127.0.0.1:1", embedder_model="m",
                               embedder_dimensions=8, embedder_api_key="sk-1\r\nX-Evil: 1"))
    assert "sk-1" not in str(failed.value)


def test_check_settings_refuses_what_open_embedder_would_without_opening_anything():
    good = {"embedder": "openai", "embedder_url": "http://127.0.0.1:1", "embedder_model": "m", "embedder_dimensions": 8}
    check_settings(Settings(**good))  # nothing listens there: nothing was asked
    check_settings(Settings())  # builtin: no model loaded to check it
    with pytest.raises(InvalidRequest, match="needs search.embedderModel"):
        check_settings(Settings(**{**good, "embedder_model": None}))
    with pytest.raises(InvalidRequest, match="search.embedderTimeoutS: must be more than 0 seconds, not 0"):
        check_settings(Settings(**good, embedder_timeout_s=0.0))
