"""Hostile JSON over every `/v1` method and both agent tools, against one real server per mode.

Bodies are built as raw bytes so they can carry what no well-behaved client sends: `1e400`,
`NaN`, `-Infinity`, unpaired `\\ud800` escapes, NUL and other control characters, very long
strings, deep nesting, and a wrong type in every field. Writes go only to keys of the agent
`fuzz`, so the seeded sessions can never legitimately change: afterwards their search, history,
listing and status answers must be exactly what they were before, and no answer may be a 5xx.

Hypothesis runs derandomized and without an example database, so no state is kept between runs
and a run of this file alone sends the same bodies each time: a failure reproduces with
`pytest tests/faults/test_fuzz.py` (within a whole-suite run the bodies may differ, from Hypothesis's
process-wide state). SESSIONSEARCH_FUZZ_SEED=<n> explores other bodies with the same strategies.
"""

from __future__ import annotations

import http.client
import json
import os
import select
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from .. import figures
from ..server import Server

SEED_KEYS = ["agent:main:seed-one", "agent:main:seed-two", "agent:ops:seed-three"]
SEED_TEXTS = {
    "agent:main:seed-one": [("user", "the loan for the harbour warehouse"), ("assistant", "Café approval pending"),
                            ("user", "東京 meeting about the loan")],
    "agent:main:seed-two": [("user", "per-session communication controls"), ("assistant", "loan approved today")],
    "agent:ops:seed-three": [("user", "ops harbour incident"), ("assistant", "incident closed, loan unrelated")],
}
SEED_WORDS = ["loan", "harbour", "café", "東京", "incident", "per-session communi", "approved"]
FUZZ_PREFIX = "agent:fuzz:"
WRITE_METHODS = ["sessions.upsert", "transcript.append", "sessions.rotate", "sessions.delete", "sessions.archive",
                 "sessions.restore"]
# Bodies nest up to this deep: past the HTTP layer's limit (512) and past where json.loads recurses
# out (near 1,000 levels, once a 500); below the limit every level reaches the methods.
MAX_BODY_NESTING = 2_000


class Raw(str):
    """JSON text emitted as is: the tokens json.dumps cannot produce (1e400, deep nesting)."""


def encode(value: Any) -> bytes:
    return _encode(value).encode("ascii")


def _encode(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k) + ":" + _encode(v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    # ensure_ascii: an unpaired surrogate leaves as a \ud800 escape, as a hostile client writes it
    return json.dumps(value)


# -- hostile values -------------------------------------------------------------------------

SPECIAL_CHARS = ["\ud800", "\udbff", "\udc00", "\udfff", "\x00", "\x01", "\x1b", "\x7f", "\x85", "\u2028", "\ufeff",
                 "\n", "\t", '"', "\\", "*", ":", "(", ")", "-", "%", "_", "'", "^", "😀", "東", "é"]
chars = st.one_of(st.characters(), st.sampled_from(SPECIAL_CHARS))
hostile_text = st.one_of(
    st.text(chars, max_size=40),
    st.sampled_from(["", " ", "\x00", "\ud800", "a\ud800b", "loan\x00approved", "OR", "NEAR(a b)", "a*", "\"",
                     "main\n", "agent:main\n:y", "../../etc", "C:\\x", "0", "-1"]),
    st.integers(4000, 70_000).map(lambda n: "loan " * (n // 5)),
    st.integers(1, 3).map(lambda n: "\ud800" * 5000 * n),
)
raw_numbers = st.sampled_from(["1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1e30", "-1e30", "-0", "0.0",
                               "541.0", "5.5", "1E2", "25.000", "1" * 400, "1" * 5000, "-9223372036854775809",
                               "18446744073709551616", "1e-400", "2.5e2"]).map(Raw)
hostile_number = st.one_of(raw_numbers, st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
                           st.integers(-3, 1100))
deep = st.integers(50, MAX_BODY_NESTING).flatmap(lambda n: st.sampled_from([
    Raw("[" * n + "]" * n), Raw('{"a":' * n + "0" + "}" * n), Raw('[{"t":' * (n // 2) + '"x"' + "}]" * (n // 2))]))
scalar = st.one_of(st.none(), st.booleans(), hostile_number, hostile_text)
hostile = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(hostile_text, inner, max_size=4)),
                       max_leaves=12) | deep


def weighted(*choices: tuple[int, st.SearchStrategy]) -> st.SearchStrategy:
    """One of the strategies, picked in proportion to its weight (st.one_of favours its first)."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(range(len(table))).flatmap(lambda i: table[i])


def tainted(plausible: list[str]) -> st.SearchStrategy:
    """Plausible text, or plausible text with a hostile character spliced in, or hostile text."""
    spliced = st.tuples(st.sampled_from(plausible), st.sampled_from(SPECIAL_CHARS), st.integers(0, 30)).map(
        lambda t: t[0][:t[2]] + t[1] + t[0][t[2]:])
    return weighted((3, st.sampled_from(plausible)), (2, spliced), (1, hostile_text))


def with_one_hostile(obj: st.SearchStrategy, names: list[str]) -> st.SearchStrategy:
    """`obj` with one of `names` (or an unknown field) set to a hostile value: one fault per body, so
    that the rest of it is plausible and the fault reaches the code that reads that field."""
    return st.tuples(obj, st.sampled_from(names + ["unknownField"]), hostile).map(
        lambda t: {**t[0], t[1]: t[2]})


def body(required: dict[str, st.SearchStrategy], optional: dict[str, st.SearchStrategy]) -> st.SearchStrategy:
    """Mostly a plausible object; often one with a hostile field; sometimes not an object at all."""
    usual = st.fixed_dictionaries(required, optional=optional)
    return weighted((5, usual), (4, with_one_hostile(usual, sorted({*required, *optional}))), (1, hostile))


UNOWNED_KEYS = ["agent:fuzz\n:x", "agent:\ud800:x", "agent::x", "agent:fuzz", "agent:fu zz:x",
                "agent:" + "f" * 65 + ":x", "agent:fuzz:" + "k" * 600, "agent:fuzz\x00:x", "", " "]


def fuzz_key() -> st.SearchStrategy:
    """A session key a write may name: only keys of the agent `fuzz`, keys no agent can own, or
    a value of the wrong type."""
    return weighted(
        (4, st.sampled_from(["a", "b", "c"]).map(lambda k: FUZZ_PREFIX + k)),
        (2, tainted(["a", "b", "c:d", "x y"]).map(lambda t: FUZZ_PREFIX + t)),
        (1, st.sampled_from(UNOWNED_KEYS)),
        (1, hostile.filter(lambda v: not isinstance(v, str))),
    )


def writes_only_fuzz_keys(body: Any) -> Any:
    """A write body whose sessionKey, if it is text, names a key of agent `fuzz` or no agent at all:
    a hostile string put there by `with_one_hostile` would otherwise name a seed agent's session."""
    if isinstance(body, dict) and isinstance(body.get("sessionKey"), str):
        key = body["sessionKey"]
        if not key.startswith(FUZZ_PREFIX) and key not in UNOWNED_KEYS:
            body = {**body, "sessionKey": FUZZ_PREFIX + key}
    return body


any_key = weighted((3, st.sampled_from(SEED_KEYS + ["agent:main:main", "main", "agent:ops:main"])), (2, fuzz_key()),
                   (1, tainted(SEED_KEYS)))
limit = weighted((4, st.integers(1, 25)), (1, st.integers(-2, 1002)), (1, raw_numbers))
plain_requester = st.fixed_dictionaries({"sessionKey": any_key}, optional={"sandboxed": st.booleans()})
requester = weighted((4, plain_requester), (1, with_one_hostile(plain_requester, ["sessionKey", "sandboxed"])))
words = tainted(SEED_WORDS)
ident = tainted(["m1", "m2", "m3", "s-seed-one", "s1"])
timestamp = weighted((3, st.integers(0, 2**45)), (3, raw_numbers), (1, hostile_number),
                     (1, tainted(["2026-01-02T03:04:05Z", "0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-01:00"])))
text_block = st.fixed_dictionaries({"type": st.sampled_from(["text", "input_text", "output_text"]), "text": words})
other_block = st.fixed_dictionaries({"type": st.sampled_from(["image", "thinking", "toolCall"])},
                                    optional={"text": hostile, "arguments": hostile, "thinking": hostile})
block = weighted((3, text_block), (2, other_block), (1, with_one_hostile(text_block, ["type", "text"])))
message_fields = {"role": st.sampled_from(["user", "assistant", "toolResult", "system"])}
message_optional = {"content": weighted((2, words), (2, st.lists(block, max_size=4))), "text": words,
                    "timestamp": timestamp}
message = weighted((4, st.fixed_dictionaries(message_fields, optional=message_optional)),
                   (1, with_one_hostile(st.fixed_dictionaries(message_fields, optional=message_optional),
                                        ["role", "content", "text", "timestamp"])))
message_event = st.fixed_dictionaries(
    {"type": st.just("message"), "id": ident, "message": message},
    optional={"parentId": st.one_of(ident, st.none()), "timestamp": timestamp, "appendMode": st.just("side")})
other_event = st.fixed_dictionaries(
    {"type": st.sampled_from(["leaf", "reset", "session", "custom", "compaction", "bogus"])},
    optional={"id": ident, "parentId": ident, "targetId": ident, "firstKeptEntryId": ident, "timestamp": timestamp,
              "reason": st.sampled_from(["new", "daily", "x"]), "data": hostile})
event = weighted((5, message_event), (2, other_event),
                 (1, with_one_hostile(message_event, ["id", "parentId", "message", "timestamp", "appendMode"])))
search_optional = {
    "agentId": tainted(["main", "ops", "fuzz", "nope"]), "sessionKeys": st.lists(weighted((6, any_key), (1, hostile)), min_size=1, max_size=4),
    "sessionId": ident, "role": st.sampled_from(["user", "assistant"]), "limit": limit,
    "match": st.sampled_from(["exact", "prefix"]), "order": st.sampled_from(["relevance", "recent"]),
    "requester": requester, "palette": st.booleans(),
}
history_optional = {"limit": weighted((3, limit), (1, st.integers(26, 1002))), "offset": limit, "messageId": ident,
                    "sessionId": ident, "includeTools": st.booleans(), "requester": requester}
search_body = weighted((3, body({"query": words}, search_optional)),
                       (1, body({"queries": st.lists(weighted((6, words), (1, hostile)), min_size=1, max_size=8)}, search_optional)))
history_body = body({"sessionKey": any_key}, history_optional)
BODIES: dict[str, st.SearchStrategy] = {
    "sessions.search": search_body,
    "sessions.history": history_body,
    "sessions.list": body({}, {"agentId": tainted(["main", "ops", "fuzz"]), "search": words, "limit": limit,
                               "requester": requester, "palette": st.booleans(), "includeArchived": st.booleans()}),
    "index.status": body({}, {"agentId": tainted(["main", "fuzz", "nope"])}),
    "sessions.upsert": body({"sessionKey": fuzz_key()}, {
        "sessionId": ident, "label": words, "displayName": words, "spawnedBy": any_key, "parentSessionKey": any_key,
        "kind": st.sampled_from(["direct", "group", "subagent", "cron"]), "group": words, "incognito": st.booleans()}),
    "transcript.append": body({"sessionKey": fuzz_key(), "events": st.lists(event, min_size=1, max_size=5)},
                              {"sessionId": ident}),
    "sessions.rotate": body({"sessionKey": fuzz_key()}, {"sessionId": ident, "reason": words}),
    "sessions.delete": body({"sessionKey": fuzz_key()}, {}),
    "sessions.archive": body({"sessionKey": fuzz_key()}, {}),
    "sessions.restore": body({"sessionKey": fuzz_key()}, {}),
    "tools/sessions_search": search_body,
    "tools/sessions_history": history_body,
}
for _name in WRITE_METHODS:
    BODIES[_name] = BODIES[_name].map(writes_only_fuzz_keys)
RAW_BODIES = [b"", b" ", b"{", b"[1,2]", b"null", b"\xff\xfe", b"\xef\xbb\xbf{}", b'{"query":"\xc3"}', b"NaN",
              b'{"query":"a"}{"query":"b"}', b'{"query":"x","query":1}', b'"\\ud800"']


def requests() -> st.SearchStrategy:
    """(path, raw body): every method and tool, with a body built for it or one of the raw oddities."""
    built = st.sampled_from(sorted(BODIES)).flatmap(
        lambda name: st.tuples(st.just(f"/v1/{name}"), BODIES[name].map(encode)))
    odd = st.tuples(st.sampled_from(sorted(f"/v1/{n}" for n in BODIES)), st.sampled_from(RAW_BODIES))
    return st.one_of(built, built, built, built, built, built, built, built, built, odd)


# -- the client and the seeds ---------------------------------------------------------------

class Client:
    """One keep-alive connection; a dropped connection is reopened and counted as a failure."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def send(self, path: str, raw: bytes) -> tuple[int, bytes]:
        sock = self.conn.sock
        if sock is not None and select.select([sock], [], [], 0)[0]:
            # readable while no answer is due: the server closed the idle keep-alive connection
            # (uvicorn's keep-alive timeout, passed while the seeds were checked on another one);
            # any client opens a new connection then, so this is no dropped request
            self.conn.close()
        try:
            self.conn.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            return 599, f"connection failed: {exc!r}".encode()

    def post(self, method: str, body: dict) -> Any:
        status, payload = self.send(f"/v1/{method}", json.dumps(body).encode())
        assert status == 200, (method, body, status, payload[:500])
        return json.loads(payload)


def seed_sessions(client: Client) -> None:
    for key, texts in SEED_TEXTS.items():
        events, parent = [], None
        for i, (role, text) in enumerate(texts, 1):
            events.append({"type": "message", "id": f"m{i}", "parentId": parent, "timestamp": "2026-01-02T03:04:05Z",
                           "message": {"role": role, "content": text, "timestamp": 1767323045000 + i}})
            parent = f"m{i}"
        client.post("sessions.upsert", {"sessionKey": key, "label": f"Seed {key.rsplit(':', 1)[1]}"})
        appended = client.post("transcript.append", {"sessionKey": key, "sessionId": "s-" + key.rsplit(":", 1)[1],
                                                     "events": events})
        assert appended["indexed"] == len(texts) and not appended["needsReconcile"]


def snapshot(client: Client) -> dict[str, Any]:
    """Every answer about the seeds that no fuzz request may change."""
    out: dict[str, Any] = {}
    for word in SEED_WORDS:
        for scope in ({"agentId": "main"}, {"agentId": "ops"}, {"sessionKeys": SEED_KEYS}):
            for match in ("exact", "prefix"):
                body = {"query": word, "match": match, **scope}
                out[json.dumps(body, ensure_ascii=False)] = client.post("sessions.search", body)
    for key in SEED_KEYS:
        out[f"history {key}"] = client.post("sessions.history", {"sessionKey": key, "limit": 1000})
        out[f"around {key}"] = client.post("sessions.history", {"sessionKey": key, "messageId": "m2", "limit": 3})
    for agent in ("main", "ops"):
        out[f"list {agent}"] = client.post("sessions.list", {"agentId": agent})
        # without the embedding counts, which the server's background embedding moves on its own
        status = client.post("index.status", {"agentId": agent})
        for row in status.get("agents", []):
            row.pop("embeddedMessages", None)
            row.pop("embeddingBacklog", None)
        out[f"status {agent}"] = status
    assert sum(len(v["results"]) for k, v in out.items() if k.startswith("{")) > 0  # the seeds are found at all
    return out


def strict_json(payload: bytes) -> Any:
    """The answer as JSON that any client can read: NaN/Infinity tokens are not JSON."""
    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(payload, parse_constant=refuse)


def fuzz(server: Server, max_examples: int, mode: str) -> None:
    client = Client(server.port)
    seed_sessions(client)
    before = snapshot(client)
    sent: list[str] = []
    failures: list[str] = []
    statuses: dict[tuple[str, int], int] = {}

    fuzz_seed = os.environ.get("SESSIONSEARCH_FUZZ_SEED")

    # deadline=None: each example is an HTTP round trip on a shared machine. The health checks judge
    # generation speed and example size, which here are the point (70,000-character strings, deep
    # nesting), not a mistake in the strategies.
    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=fuzz_seed is None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(requests())
    def one(request: tuple[str, bytes]) -> None:
        path, raw = request
        status, payload = client.send(path, raw)
        sent.append(path)
        statuses[(path, status)] = statuses.get((path, status), 0) + 1
        problem = None
        if status >= 500:
            problem = f"status {status}"
        else:
            try:
                answer = strict_json(payload)
                if path.startswith("/v1/tools/") and answer.get("error") == "internal error":
                    problem = "tool answered internal error"
                elif status >= 400 and not answer["error"]["message"]:
                    problem = "error without a message"
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                problem = f"unreadable answer ({exc})"
        if problem:
            failures.append(f"{problem}: POST {path} {raw[:300]!r} -> {payload[:300]!r}")

    if fuzz_seed is not None:
        one = seed(int(fuzz_seed))(one)
    one()
    after = snapshot(client)
    fives = sum(n for (_, code), n in statuses.items() if code >= 500)
    print(f"fuzz ({mode}): {len(sent)} requests over {len(set(sent))} paths, {fives} 5xx, {len(failures)} failed "
          f"answers (5xx, unreadable, a tool's internal error); {len(before)} seed answers checked")
    by_path = {path: {str(code): n for (p, code), n in sorted(statuses.items()) if p == path}
               for path in sorted(set(sent))}
    changed = [k for k in before if before[k] != after[k]]
    figures.record("fuzz", mode, {"requests": len(sent), "paths": len(by_path), "status_5xx": fives, "failures": len(failures),
                  "seed_answers_checked": len(before), "seed_answers_changed": len(changed),
                  "hypothesis": f"seed {fuzz_seed}" if fuzz_seed else "derandomized", "by_path": by_path})
    for path, codes in by_path.items():
        print(f"  {path}: " + ", ".join(f"{n} x {code}" for code, n in codes.items()))
    assert len(set(sent)) == len(BODIES), sorted(set(sent))  # every method and tool was reached
    assert not failures, f"{len(failures)} of {len(sent)} answers failed; the first few:\n" + "\n".join(failures[:8])
    assert not changed, f"seed answers changed: {changed[:5]}\nbefore {before[changed[0]]}\nafter {after[changed[0]]}"


def test_hostile_json_on_every_method_gives_no_5xx_and_leaves_the_seeds_intact_embedded(tmp_path):
    server = Server(tmp_path / "data", tmp_path / "server.log")
    try:
        fuzz(server, 3000, "embedded")
    finally:
        assert server.stop() == 0


def test_hostile_json_on_every_method_gives_no_5xx_and_leaves_the_seeds_intact_with_redis(tmp_path, redis_url):
    server = Server(tmp_path / "data", tmp_path / "server.log", SESSIONSEARCH_REDIS_URL=redis_url)
    try:
        fuzz(server, 800, "redis")
    finally:
        assert server.stop() == 0
