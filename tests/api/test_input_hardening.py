"""Values a client sends: every bad one is a clear 400 naming its field, never a 500 or lost data."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionsearch import values
from sessionsearch.errors import InvalidRequest
from sessionsearch.protocol import AppendParams, HistoryParams, ListParams, SearchParams, UpsertParams
from sessionsearch.transcript.events import MAX_EVENT_DEPTH, MAX_TS_MS, MIN_TS_MS, parse_event

from ..helpers import chain, engine_at, msg

KEY = "agent:main:main"
TS_RANGE = "between -62135596800000 and 253402300799999 (years 1 to 9999 UTC)"


def nested(depth: int) -> object:
    """A list nested `depth` levels deep (depth 1 is `[]`)."""
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


def rejected(raw: object, where: str = "events[2]") -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse_event(raw, where)
    return caught.value


# -- timestamps ------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), 1e30, -1e30, 2**63, MAX_TS_MS + 1,
                                 MIN_TS_MS - 1])
def test_a_message_timestamp_outside_years_1_to_9999_is_refused_naming_the_field(bad):
    err = rejected(msg("m1", "user", "hi", ts=bad))
    assert err.field == "events[2].message.timestamp"
    assert err.message.startswith("events[2].message.timestamp: ") and TS_RANGE in err.message


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), 1e30, -1e30])
def test_an_event_timestamp_outside_the_range_is_refused_naming_the_field(bad):
    err = rejected({"type": "session", "id": "s1", "timestamp": bad})
    assert err.field == "events[2].timestamp" and TS_RANGE in err.message


@pytest.mark.parametrize("iso", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"])
def test_an_iso_timestamp_that_leaves_the_range_in_utc_is_refused(iso):
    err = rejected({"type": "session", "id": "s1", "timestamp": iso})
    assert err.field == "events[2].timestamp" and TS_RANGE in err.message


def test_the_ends_of_the_timestamp_range_are_accepted():
    assert parse_event(msg("m1", "user", "hi", ts=MIN_TS_MS), "e").ts == MIN_TS_MS
    assert parse_event(msg("m1", "user", "hi", ts=float(MAX_TS_MS)), "e").ts == MAX_TS_MS
    assert parse_event({"type": "session", "id": "s", "timestamp": "0001-01-01T00:00:00Z"}, "e").ts == MIN_TS_MS
    assert parse_event({"type": "session", "id": "s", "timestamp": "9999-12-31T23:59:59.999Z"}, "e").ts == MAX_TS_MS


# -- lone surrogates -------------------------------------------------------------------------

@pytest.mark.parametrize("event,path", [
    (msg("m1", "user", "a \ud800 b"), "events[2].message.content"),
    (msg("m\udc00", "user", "fine"), "events[2].id"),
    (msg("m1", "user", "fine", parent="p\ud800"), "events[2].parentId"),
    ({**msg("m1", "user", "x"), "message": {"role": "user\ud800", "content": "x"}}, "events[2].message.role"),
    (msg("m1", "assistant", [{"type": "text", "text": "ok"}, {"type": "text", "text": "\udfff"}]),
     "events[2].message.content[1].text"),
    (msg("m1", "assistant", [{"type": "toolCall", "arguments": {"deep": ["x", {"y": "\ud83d"}]}}]),
     "events[2].message.content[0].arguments.deep[1].y"),
    ({"type": "custom", "id": "c1", "data\ud800": 1}, "events[2]"),
    ({"type": "session", "id": "s\ud800"}, "events[2].id"),
])
def test_a_lone_surrogate_anywhere_in_an_event_is_refused_naming_where(event, path):
    err = rejected(event)
    assert err.field == path
    assert "contains an unpaired surrogate (U+D" in err.message and err.message.startswith(path)
    json.dumps(err.message, ensure_ascii=False).encode()  # the message itself is sendable


def test_a_properly_paired_surrogate_pair_is_ordinary_text():
    assert parse_event(msg("m1", "user", "smile 😀"), "e").text == "smile 😀"


# -- nesting and numbers that cannot be stored ----------------------------------------------

def test_an_event_nested_past_the_limit_is_refused_and_one_at_the_limit_is_kept():
    # the event object is level 1, message level 2, the content list level 3, its block level 4
    fits = msg("m1", "assistant", [{"type": "toolCall", "arguments": nested(MAX_EVENT_DEPTH - 4)}])
    assert parse_event(fits, "e").type == "message"
    err = rejected(msg("m1", "assistant", [{"type": "toolCall", "arguments": nested(MAX_EVENT_DEPTH - 3)}]))
    assert err.field.startswith("events[2].message.content[0].arguments")
    assert f"nested deeper than {MAX_EVENT_DEPTH} levels" in err.message


def test_an_event_nested_beyond_the_interpreters_recursion_limit_is_a_clear_error():
    err = rejected(msg("m1", "user", nested(5000)))
    assert err.message == f"events[2].message.content[0][0][0][0]… nested deeper than {MAX_EVENT_DEPTH} levels"
    assert err.field == "events[2].message.content" + "[0]" * (MAX_EVENT_DEPTH - 2)  # the first list past level 100


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_number_inside_an_event_is_refused(bad):
    err = rejected(msg("m1", "assistant", [{"type": "toolCall", "arguments": {"n": bad}}]))
    assert err.field == "events[2].message.content[0].arguments.n" and "finite number" in err.message


def test_a_value_that_is_not_json_data_is_refused():
    err = rejected(msg("m1", "assistant", [{"type": "toolCall", "arguments": {"n": {1, 2}}}]))
    assert err.field == "events[2].message.content[0].arguments.n" and "JSON" in err.message


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.sampled_from([1, -1]).map(lambda sign: sign * 10**4300),
              st.text(st.one_of(st.characters(), st.sampled_from(["\ud800", "\udfff", "\x00"])), max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
        st.text(st.one_of(st.characters(), st.just("\udc00")), max_size=3), inner, max_size=3)),
    max_leaves=20)


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.lists(json_values, max_size=3), st.integers(1, 6))
def test_the_quick_check_and_the_explaining_walk_agree(value, max_depth):
    # the quick pass decides the common case alone, so it must refuse exactly what the walk refuses
    try:
        values._explain(value, "v", max_depth)
        refused = False
    except InvalidRequest:
        refused = True
    assert values._clean(value, max_depth) is not refused


# -- through the Python API and the HTTP server, nothing stored on refusal --------------------

async def test_a_bad_event_in_a_batch_stores_nothing_through_the_python_api(tmp_path):
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "kept words")])))
        for bad in (msg("x1", "user", "\ud800"), msg("x1", "user", "t", ts=1e400), msg("x1", "user", nested(900))):
            with pytest.raises(InvalidRequest):
                await engine.append(AppendParams(sessionKey=KEY, events=[msg("ok1", "user", "valid neighbour", "m1"), bad]))
        assert [m["messageId"] for m in (await engine.history(HistoryParams(sessionKey=KEY)))["messages"]] == ["m1"]
        assert (await engine.search(SearchParams(query="neighbour")))["results"] == []


def test_bad_event_values_are_400_naming_the_field_over_http(server):
    assert server.post("transcript.append", {"sessionKey": KEY, "events": chain("m", [("user", "first")])})[0] == 200
    cases = [
        (b'{"type":"message","id":"x","message":{"role":"user","content":"a","timestamp":1e400}}',
         "events[0].message.timestamp"),
        (b'{"type":"message","id":"x","message":{"role":"user","content":"a","timestamp":NaN}}',
         "events[0].message.timestamp"),
        (b'{"type":"message","id":"x","message":{"role":"user","content":"a","timestamp":-1e30}}',
         "events[0].message.timestamp"),
        (b'{"type":"message","id":"x","timestamp":1e30,"message":{"role":"user","content":"a"}}',
         "events[0].timestamp"),
        (b'{"type":"message","id":"x","message":{"role":"user","content":"lone \\ud800"}}',
         "events[0].message.content"),
        (b'{"type":"message","id":"x\\udc01","message":{"role":"user","content":"a"}}', "events[0].id"),
        (b'{"type":"message","id":"x","message":{"role":"user","content":' + b"[" * 300 + b"]" * 300 + b"}}",
         "events[0].message.content"),
    ]
    for event, path in cases:
        status, body = server.post("transcript.append", raw=b'{"sessionKey":"agent:main:main","events":[' + event + b"]}")
        assert status == 400, (event[:80], body)
        assert body["error"]["code"] == "INVALID_REQUEST" and body["error"]["message"].startswith(path), body
    status, history = server.post("sessions.history", {"sessionKey": KEY})
    assert status == 200 and [m["messageId"] for m in history["messages"]] == ["m1"]


# -- unpaired surrogates in request fields ----------------------------------------------------

SURROGATE_CASES = [
    ("sessions.upsert", '{"sessionKey":"agent:main:x\\ud800"}', "sessionKey"),
    ("sessions.upsert", '{"sessionKey":"agent:main:x","label":"L \\ud800"}', "label"),
    ("sessions.upsert", '{"sessionKey":"agent:main:x","displayName":"\\udc00"}', "displayName"),
    ("sessions.upsert", '{"sessionKey":"agent:main:x","group":"g\\ud800"}', "group"),
    ("sessions.upsert", '{"sessionKey":"agent:main:x","sessionId":"s\\ud800"}', "sessionId"),
    ("sessions.upsert", '{"sessionKey":"agent:main:x","spawnedBy":"agent:main:\\ud800"}', "spawnedBy"),
    ("transcript.append", '{"sessionKey":"\\ud800","events":[]}', "sessionKey"),
    ("transcript.append", '{"sessionKey":"agent:main:x","sessionId":"\\ud800","events":[]}', "sessionId"),
    ("sessions.search", '{"query":"loan\\ud800approved"}', "query"),
    ("sessions.search", '{"queries":["loan","a\\udfffb"]}', "queries[1]"),
    ("sessions.search", '{"query":"loan","sessionId":"s\\ud800"}', "sessionId"),
    ("sessions.search", '{"query":"loan","sessionKeys":["agent:main:main","k\\ud800"]}', "sessionKeys[1]"),
    ("sessions.search", '{"query":"loan","requester":{"sessionKey":"agent:main:\\ud800"}}',
     "requester.sessionKey"),
    ("sessions.history", '{"sessionKey":"agent:main:main","messageId":"m\\ud800"}', "messageId"),
    ("sessions.history", '{"sessionKey":"agent:main:main","messageId":"m1","sessionId":"\\ud800"}', "sessionId"),
    ("sessions.list", '{"search":"main \\ud800"}', "search"),
    ("sessions.rotate", '{"sessionKey":"agent:main:main","sessionId":"\\ud800"}', "sessionId"),
    ("sessions.rotate", '{"sessionKey":"agent:main:main","reason":"\\ud800"}', "reason"),
    ("sessions.delete", '{"sessionKey":"agent:main:\\ud800"}', "sessionKey"),
    ("sessions.archive", '{"sessionKey":"main\\ud800"}', "sessionKey"),
    ("sessions.restore", '{"sessionKey":"agent:main:\\ud800"}', "sessionKey"),
]


def test_an_unpaired_surrogate_in_any_request_field_is_400_naming_it(server):
    assert server.post("transcript.append", {"sessionKey": KEY, "sessionId": "s1",
                                             "events": chain("m", [("user", "the loan is approved")])})[0] == 200
    for method, body, field in SURROGATE_CASES:
        status, answer = server.post(method, raw=body.encode())
        assert status == 400, (method, body, answer)
        assert answer["error"]["message"].startswith(f"{field} contains an unpaired surrogate (U+D"), answer
    status, answer = server.post("tools/sessions_search", raw=b'{"query":"a\\ud800b"}')
    assert status == 200 and answer["status"] == "error" and "unpaired surrogate" in answer["error"]
    status, answer = server.post("tools/sessions_history", raw=b'{"sessionKey":"agent:main:\\ud800"}')
    assert status == 200 and answer["status"] == "error" and "unpaired surrogate" in answer["error"]
    status, found = server.post("sessions.search", {"query": "loan"})
    assert [h["messageId"] for h in found["results"]] == ["m1"]
    assert [s["sessionKey"] for s in server.post("sessions.list", {})[1]["sessions"]] == [KEY]


async def test_an_unpaired_surrogate_is_refused_by_the_python_api_naming_the_field(tmp_path):
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "the loan is approved")])))
        for call, field in [
            (lambda: engine.upsert_session(UpsertParams(sessionKey="agent:main:x", label="\ud800")), "label"),
            (lambda: engine.upsert_session(UpsertParams(sessionKey="agent:main:\udc00")), "sessionKey"),
            (lambda: engine.search(SearchParams(query="loan \ud800x")), "query"),
            (lambda: engine.history(HistoryParams(sessionKey=KEY, messageId="\ud800")), "messageId"),
            (lambda: engine.list_sessions(ListParams(search="\ud800")), "search"),
        ]:
            with pytest.raises(InvalidRequest) as caught:
                await call()
            assert caught.value.field == field and "unpaired surrogate" in caught.value.message


# -- control characters in query words ------------------------------------------------------

@pytest.mark.parametrize("sep", ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\x85"])
def test_a_control_character_in_a_query_word_separates_words(server, sep):
    server.post("transcript.append", {"sessionKey": KEY, "events": chain("m", [
        ("user", "the loan is approved"), ("assistant", "the loan is pending")])})
    status, found = server.post("sessions.search", {"query": f"loan{sep}approved"})
    assert status == 200, found
    assert [h["messageId"] for h in found["results"]] == ["m1"]
    status, found = server.post("sessions.search", {"query": f"loan{sep}pend", "match": "prefix"})
    assert status == 200 and [h["messageId"] for h in found["results"]] == ["m2"]
    # like whitespace, control characters alone leave nothing to search for
    assert server.post("sessions.search", {"query": f" {sep}{sep}"}) == (
        400, {"error": {"code": "INVALID_REQUEST", "message": "query must not be empty"}})


async def test_text_stored_with_a_nul_is_found_by_its_words(tmp_path):
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "alpha\x00beta gamma")])))
        assert [h["messageId"] for h in (await engine.search(SearchParams(query="alpha\x00beta")))["results"]] == ["m1"]
        assert [h["messageId"] for h in (await engine.search(SearchParams(query="beta")))["results"]] == ["m1"]
        history = await engine.history(HistoryParams(sessionKey=KEY))
        assert history["messages"][0]["content"] == "alpha\x00beta gamma"


# -- agent ids ------------------------------------------------------------------------------

def test_an_agent_id_with_a_trailing_newline_is_400_and_creates_no_file(server, tmp_path):
    agents = tmp_path / "data" / "agents"
    for method, body, field in [
        ("sessions.upsert", {"sessionKey": "agent:main\n:y"}, "sessionKey"),
        ("transcript.append", {"sessionKey": "agent:main\n:y", "events": chain("m", [("user", "x")])}, "sessionKey"),
        ("sessions.search", {"query": "x", "agentId": "main\n"}, "agentId"),
        ("sessions.search", {"query": "x", "sessionKeys": ["agent:ops\n:z"]}, "sessionKeys[0]"),
        ("sessions.list", {"agentId": "main\n"}, "agentId"),
        ("index.status", {"agentId": "main\n"}, "agentId"),
        ("sessions.history", {"sessionKey": "agent:main\n:y"}, "sessionKey"),
    ]:
        status, answer = server.post(method, body)
        assert status == 400 and answer["error"]["message"].startswith(field), (method, body, answer)
    assert sorted(p.name for p in agents.iterdir()) == []


async def test_a_database_file_named_with_a_newline_is_not_an_agent(tmp_path):
    async with engine_at(tmp_path) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "hello")])))
        # what an older version created for agent:main\n:y: a whole database under a bad name
        (tmp_path / "agents" / "main\n.db").write_bytes((tmp_path / "agents" / "main.db").read_bytes())
        assert engine.agent_ids_on_disk() == ["main"]
        assert [a["agentId"] for a in (await engine.index_status())["agents"]] == ["main"]
        assert [agent for agent, _ in engine.backend.agent_status()] == ["main"]  # no metric label for it either


# -- integers -------------------------------------------------------------------------------

def test_an_integral_float_is_an_integer_and_anything_else_is_refused_naming_the_field(server):
    server.post("transcript.append", {"sessionKey": KEY, "events": chain(
        "m", [("user", f"loan number {i}") for i in range(1, 6)])})
    status, found = server.post("sessions.search", {"query": "loan", "limit": 2.0})
    assert status == 200 and len(found["results"]) == 2
    status, tail = server.post("sessions.history", {"sessionKey": KEY, "limit": 2.0, "offset": 1.0})
    assert status == 200 and [m["messageId"] for m in tail["messages"]] == ["m3", "m4"]
    status, listed = server.post("sessions.list", {"limit": 1.0})
    assert status == 200 and len(listed["sessions"]) == 1
    status, answer = server.post("sessions.search", {"query": "loan", "limit": 541.0})
    assert status == 400 and answer["error"]["message"] == "limit must be between 1 and 25"
    status, answer = server.post("sessions.history", {"sessionKey": KEY, "limit": 541.0})
    assert status == 200 and len(answer["messages"]) == 5
    integer = "{} must be an integer"
    for method, field, value, message in [
            ("sessions.search", "limit", b"5.5", integer), ("sessions.search", "limit", b"true", integer),
            ("sessions.search", "limit", b'"5"', integer), ("sessions.search", "limit", b"1e400", integer),
            ("sessions.search", "limit", b"NaN", integer), ("sessions.history", "offset", b"-Infinity", integer),
            ("sessions.history", "offset", b"0.5", integer), ("sessions.list", "limit", b"[1]", integer),
            ("sessions.history", "limit", b"1e30", "{} must be between 1 and 1000"),
            ("sessions.history", "offset", b"-1.0", "{} must be at least 0")]:
        extra = b'"query":"loan",' if method == "sessions.search" else b'"sessionKey":"agent:main:main",' \
            if method == "sessions.history" else b""
        status, answer = server.post(method, raw=b"{" + extra + f'"{field}":'.encode() + value + b"}")
        assert (status, answer["error"]["message"]) == (400, message.format(field)), (method, value, answer)


# -- the CLI prints any timestamp ------------------------------------------------------------

async def test_the_cli_prints_hits_and_history_whatever_their_timestamps(tmp_path):
    import dataclasses

    from ..ops.test_cli import _cli

    async with engine_at(tmp_path) as engine:
        store = await engine.store("main", create=True)
        # rows a version without the range check stored: far past year 9999 and before year 1
        events = [dataclasses.replace(parse_event(msg(f"m{i}", "user", f"ancient loan {i}", parent), "e"), ts=ts)
                  for i, (ts, parent) in enumerate([(10**15, None), (-(10**15), "m0"), (2**62, "m1"),
                                                    (MAX_TS_MS, "m2"), (MIN_TS_MS, "m3")])]
        await store.append(KEY, events)
    result = await asyncio.to_thread(_cli, "search", "loan", data_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ancient loan") == 5 and "9999-12-31 23:59" in result.stdout
    result = await asyncio.to_thread(_cli, "history", KEY, data_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ancient loan") == 5 and "0001-01-01 00:00" in result.stdout
    assert str(10**15) in result.stdout


def test_an_upsert_naming_a_field_that_is_a_python_keyword_of_the_method_is_400(server):
    for name in ("self", "sessionKey_", "fields"):
        status, body = server.post("sessions.upsert", {"sessionKey": "agent:main:x", name: 1})
        assert status == 400 and body["error"]["code"] == "INVALID_REQUEST" and name in body["error"]["message"], body
