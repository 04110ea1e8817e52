"""Search requests as the search runs them, and the words each query matches (a store.Match).

The wire's declaration of sessions.search is protocol/search.py, which builds a SearchRequest."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import InvalidRequest
from ..identity import Requester
from ..store.base import Match
from ..text.cjk import query_parts
from ..text.unicode61 import tokens
from ..text.utf16 import utf16_len
from ..values import check_text
from .cost import merged_words
from .scope import SessionScope
from .text import term_pieces

MAX_QUERY_UNITS = 4096
MAX_QUERIES = 8
MAX_SESSION_KEYS = 200
MAX_LIMIT = 25
DEFAULT_LIMIT = 10

# C0 and C1 control characters separate query words as whitespace does: unicode61 never keeps them
# inside a token, and a NUL inside an FTS5 string literal would end it ("unterminated string")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


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
    scope: SessionScope | None = None  # the session list's filters (search/scope.py)


def build_match(words: list[str], prefix: bool) -> Match | None:
    return Match(tuple(words), prefix) if words else None


def clean_query(raw: object, *, where: str = "query") -> str:
    """A query's text as searched (control characters read as spaces), or InvalidRequest naming `where`."""
    if not isinstance(raw, str):
        raise InvalidRequest(f"{where} must be a string", field=where)
    text = _CONTROL.sub(" ", check_text(raw, where)).strip()
    if not text:
        raise InvalidRequest("query must not be empty", field=where)
    if utf16_len(text) > MAX_QUERY_UNITS:
        raise InvalidRequest(f"query must not exceed {MAX_QUERY_UNITS} characters", field=where)
    return text


def query_words(text: str, *, prefix: bool) -> ParsedQuery:
    """The words of a cleaned query's text and what they match."""
    words = merged_words((w for w in text.split() if tokens(w)), prefix=prefix)
    terms = [t for w in words for t in term_pieces(w)]
    return ParsedQuery(text, words, prefix, build_match(words, prefix), terms)


def parse_query(raw: object, *, prefix: bool, where: str = "query") -> ParsedQuery:
    return query_words(clean_query(raw, where=where), prefix=prefix)
