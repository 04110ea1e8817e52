"""Search requests: validation, and the words each query matches (a store.Match)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequest
from ..identity import Requester, parse_requester
from ..keys import check_agent_id, check_session_key
from ..store.base import Match
from ..text.cjk import query_parts
from ..text.unicode61 import tokens
from ..text.utf16 import utf16_len
from ..values import check_name, check_text, without_nulls
from .cost import merged_words
from .text import term_pieces
from .timerange import parse_range

MAX_QUERY_UNITS = 4096
MAX_QUERIES = 8
MAX_SESSION_KEYS = 200
MAX_LIMIT = 25
DEFAULT_LIMIT = 10

# C0 and C1 control characters separate query words as whitespace does: unicode61 never keeps them
# inside a token, and a NUL inside an FTS5 string literal would end it ("unterminated string")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

SEARCH_FIELDS = {"query", "queries", "agentId", "sessionKeys", "sessionId", "role", "limit", "match", "order",
                 "requester", "palette", "since", "until", "resultMode", "mode"}


@dataclass
class ParsedQuery:
    """One query's words and what they match."""

    text: str
    words: list[str]  # words that hold at least one token
    prefix: bool
    match: Match | None  # None: nothing could match (only punctuation)
    terms: list[str] = field(default_factory=list)  # folded tokens, for snippets

    @property
    def hot_token(self) -> str | None:
        """The FTS5 token of a one-word query that a word's postings can answer, else None: a word
        of ASCII letters and digits once folded (unicode61 keeps it as one token, lowercased), or
        a CJK run of one or two characters (its unigram or bigram shadow token, text/cjk.py)."""
        if len(self.words) != 1 or self.prefix:
            return None
        parts = query_parts(self.words[0])
        if len(parts) != 1:
            return None
        kind, text = parts[0]
        if kind == "cjk":
            return text if len(text) <= 2 else None
        return text.lower() if text.isascii() and text.isalnum() else None


@dataclass
class SearchRequest:
    queries: list[ParsedQuery]
    batch: bool  # `queries` was given: answer {"states": [...]}
    agent_id: str | None
    session_keys: list[str] | None
    session_id: str | None
    role: str | None
    limit: int
    prefix: bool
    order: str
    requester: Requester | None
    palette: bool = False
    since: int | None = None  # epoch ms, inclusive, on the hit's timestamp
    until: int | None = None  # epoch ms, exclusive
    result_mode: str = "messages"  # or "sessions": the best hit per session
    mode: str = "keyword"  # or "semantic", "hybrid" (search/meaning.py)


def build_match(words: list[str], prefix: bool) -> Match | None:
    return Match(tuple(words), prefix) if words else None


def parse_query(raw: object, *, prefix: bool, where: str = "query") -> ParsedQuery:
    if not isinstance(raw, str):
        raise InvalidRequest(f"{where} must be a string", field=where)
    text = _CONTROL.sub(" ", check_text(raw, where)).strip()
    if not text:
        raise InvalidRequest("query must not be empty", field=where)
    if utf16_len(text) > MAX_QUERY_UNITS:
        raise InvalidRequest(f"query must not exceed {MAX_QUERY_UNITS} characters", field=where)
    words = merged_words((w for w in text.split() if tokens(w)), prefix=prefix)
    terms = [t for w in words for t in term_pieces(w)]
    return ParsedQuery(text, words, prefix, build_match(words, prefix), terms)


def check_unknown(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidRequest(f"unknown field {unknown[0]!r}", field=unknown[0])


def int_field(body: dict[str, Any], name: str, default: int | None, lo: int, hi: int | None) -> int | None:
    """An integer field within lo..hi. A float with no fraction (541.0) is that integer, as JSON Schema
    counts it; fractions, NaN, infinities, booleans and strings are refused."""
    value = body.get(name)
    if value is None:  # absent or null: the default
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be an integer", field=name)
    if value < lo or (hi is not None and value > hi):
        span = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise InvalidRequest(f"{name} must be {span}", field=name)
    return value


def parse_search(body: object) -> SearchRequest:
    """Validate a `sessions.search` body; raise InvalidRequest naming the field at fault."""
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    check_unknown(body, SEARCH_FIELDS)
    body = without_nulls(body)
    match = body.get("match", "exact")
    if match not in ("exact", "prefix"):
        raise InvalidRequest('match must be "exact" or "prefix"', field="match")
    order = body.get("order", "relevance")
    if order not in ("relevance", "recent"):
        raise InvalidRequest('order must be "relevance" or "recent"', field="order")
    prefix = match == "prefix"
    mode = body.get("mode", "keyword")
    if mode not in ("keyword", "semantic", "hybrid"):
        raise InvalidRequest('mode must be "keyword", "semantic" or "hybrid"', field="mode")
    if order == "recent" and mode != "keyword":
        raise InvalidRequest('order "recent" needs mode "keyword"', field="order")
    result_mode = body.get("resultMode", "messages")
    if result_mode not in ("messages", "sessions"):
        raise InvalidRequest('resultMode must be "messages" or "sessions"', field="resultMode")
    if ("query" in body) == ("queries" in body):
        raise InvalidRequest("give exactly one of query and queries", field="query")
    if "queries" in body:
        raw = body["queries"]
        if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_QUERIES:
            raise InvalidRequest(f"queries must be a list of 1 to {MAX_QUERIES} strings", field="queries")
        queries = [parse_query(q, prefix=prefix, where=f"queries[{i}]") for i, q in enumerate(raw)]
    else:
        queries = [parse_query(body["query"], prefix=prefix)]
    agent_id = body.get("agentId")
    if agent_id is not None:
        check_agent_id(agent_id)
    keys = body.get("sessionKeys")
    if keys is not None:
        if not isinstance(keys, list) or not 1 <= len(keys) <= MAX_SESSION_KEYS:
            raise InvalidRequest(f"sessionKeys must be a list of 1 to {MAX_SESSION_KEYS} session keys",
                                 field="sessionKeys")
        keys = [check_session_key(k, field=f"sessionKeys[{i}]") for i, k in enumerate(keys)]
        keys = list(dict.fromkeys(keys))
    session_id = check_name(body.get("sessionId"), "sessionId")
    role = body.get("role")
    if role is not None and role not in ("user", "assistant"):
        raise InvalidRequest('role must be "user" or "assistant"', field="role")
    palette = body.get("palette", False)
    if not isinstance(palette, bool):
        raise InvalidRequest("palette must be a boolean", field="palette")
    limit = int_field(body, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    assert limit is not None  # it has a default
    since, until = parse_range(body)  # top-level: they apply to every one of `queries`
    return SearchRequest(queries, "queries" in body, agent_id, keys, session_id, role, limit, prefix, order,
                         parse_requester(body.get("requester")), palette, since, until, result_mode, mode)
