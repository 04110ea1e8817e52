"""What PostgreSQL indexes of a message, and how a search's words become a tsquery.

PostgreSQL never tokenizes anything here: a message's tokens are those of SQLite's `unicode61
remove_diacritics 2` (text/unicode61.py), computed in Python, of its index form (text/cjk.py: each
CJK run as its bigrams then its unigrams, whose characters unicode61 keeps as they are). The row
keeps a tsvector of those lexemes with their positions (for the GIN index and phrases), their
counts (tf, jsonb: exact, where a tsvector keeps at most 256 positions of a lexeme) and the row's
length in tokens (dl): what BM25 needs. The tsvector is written as a tsvector literal of our own
lexemes, each quoted; a search's words become a tsquery assembled in SQL from bound arrays
(search.py), so no user text is ever read as tsquery syntax.

A query word is a phrase of its tokens, as FTS5 reads a quoted string (`per-session` is `per`
then `session`); each CJK run in it is a phrase of its own, of the run's bigrams (store/sqlite/
fts.py makes the same phrases for FTS5).

Limits of tsvector: a lexeme holds at most 2,047 bytes, so a token longer than MAX_TOKEN_BYTES is
stored and searched as its first KEPT_BYTES bytes, `~` and its SHA-256 (`~` is no token character:
no other token has that lexeme): it matches as a whole word by the lexeme, and a prefix of at most
KEPT_BYTES bytes matches it as it matches any token; a longer prefix is cut to KEPT_BYTES bytes.
Positions stop at 16,383, so phrases (never single words) are found only within a message's first
16,383 tokens; a lexeme keeps its first 256 positions, so a phrase is found only where each of its
tokens is within its first 256 occurrences in the message; and a tsvector holds at most 1 MB of
lexemes, so distinct tokens past MAX_LEXEME_BYTES are left out of the index (README, "Deviations
from the SPEC").
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

from ...text.cjk import bigrams, fold, needs_fold, query_parts, shadow, split_runs
from ...text.unicode61 import tokens

MAX_TOKEN_BYTES = 2046
KEPT_BYTES = MAX_TOKEN_BYTES - 65  # what of a longer token its lexeme keeps, before `~` and the hash
MAX_LEXEME_BYTES = 900_000
MAX_POS = 16383  # tsvector's highest position
MAX_POSITIONS = 256  # positions a tsvector keeps per lexeme
FAST_CHARS = MAX_TOKEN_BYTES // 4  # ASCII text this short has no token past MAX_TOKEN_BYTES
TF_JSON = json.JSONEncoder(ensure_ascii=False)  # json.dumps with an option makes an encoder per call


def index_tokens(text: str) -> list[str]:
    """`tokens(cjk.index_text(text))`, without tokenizing the shadow tokens one by one: each run's
    bigrams and unigrams are its tokens as they stand (a tenth of the time on CJK text)."""
    if text.isascii() or not needs_fold(text):
        return tokens(text)
    out: list[str] = []
    for i, piece in enumerate(split_runs(fold(text))):
        if i % 2:
            out += shadow(piece).split(" ")
        elif piece:
            out += tokens(piece)
    return out


ESCAPE = "\uffff"


def stored_text(text: str | None) -> str | None:
    """A message's text as its `text` column holds it: PostgreSQL's text holds no NUL, so NUL is
    ESCAPE then U+FFFE, and ESCAPE itself doubled. Both are separators to unicode61, as NUL is, so
    the stored text tokenizes as the text does (reconciliation tokenizes it as it is stored)."""
    if text is None or ("\x00" not in text and ESCAPE not in text):
        return text
    return text.replace(ESCAPE, ESCAPE * 2).replace("\x00", ESCAPE + "\ufffe")


def read_text(text: str) -> str:
    """The text stored_text() stored."""
    if ESCAPE not in text:
        return text
    out, i = [], 0
    while (j := text.find(ESCAPE, i)) >= 0:
        out.append(text[i:j])
        out.append("\x00" if text[j + 1:j + 2] == "\ufffe" else ESCAPE)
        i = j + 2
    out.append(text[i:])
    return "".join(out)


def _kept(token: str) -> str:
    """The longest prefix of `token` within KEPT_BYTES bytes of UTF-8."""
    return token.encode("utf-8")[:KEPT_BYTES].decode("utf-8", "ignore")


def lexeme(token: str) -> str:
    """The lexeme a token is stored and searched as."""
    if len(token) * 4 <= MAX_TOKEN_BYTES or len(token.encode("utf-8")) <= MAX_TOKEN_BYTES:
        return token
    return _kept(token) + "~" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def quote(lex: str) -> str:
    """A lexeme as tsvector/tsquery input reads it literally: single-quoted, quotes and backslashes doubled."""
    return "'" + lex.replace("\\", "\\\\").replace("'", "''") + "'"


def index_fields(text: str) -> tuple[int, str, str]:
    """(dl, tf as JSON, tsvector literal) of a message's text: the tokens of its index form
    (text/cjk.py: each CJK run as its bigrams then its unigrams, at consecutive positions).

    Most messages are written as one `'lexeme':position` per token, in order: tsvector input
    merges a lexeme's positions itself (in C, a fifth of the Python time of merging them here).
    That gives the same tsvector whenever no limit applies; a message past one (positions over
    16,383, a lexeme's 257th, a token or the lexemes too long) is merged here, within them."""
    toks = index_tokens(text)
    tf = Counter(toks)
    # ASCII text of at most FAST_CHARS characters and MAX_POSITIONS tokens is within every limit
    # (no token or lexemes longer than the text, no lexeme more often than the tokens): unchecked
    if (len(toks) > MAX_POSITIONS or len(text) > FAST_CHARS or not text.isascii()) and tf and (
            len(toks) > MAX_POS or max(tf.values()) > MAX_POSITIONS or max(map(len, tf)) * 4 > MAX_TOKEN_BYTES
            or sum(map(len, tf)) * 4 + 8 * len(tf) > MAX_LEXEME_BYTES):
        return _index_fields_limited(toks)
    # unquoted: a token never holds `'` or `\` (they are not token characters), the only characters
    # tsvector input reads specially inside quotes
    tsv = " ".join([f"'{t}':{pos}" for pos, t in enumerate(toks, 1)])
    return len(toks), TF_JSON.encode(tf), tsv


def _index_fields_limited(toks: list[str]) -> tuple[int, str, str]:
    """index_fields() of a message that meets a limit of tsvector (lexemes.py's docstring)."""
    positions: dict[str, list[int]] = {}
    for pos, tok in enumerate(toks, 1):
        positions.setdefault(lexeme(tok), []).append(pos)
    parts, size = [], 0
    for lex, where in positions.items():
        size += len(lex.encode("utf-8")) + 8
        if size > MAX_LEXEME_BYTES:
            break
        kept = [p for p in where[:MAX_POSITIONS] if p <= MAX_POS] or [MAX_POS]
        parts.append(f"{quote(lex)}:{','.join(map(str, kept))}")
    tf = {lex: len(where) for lex, where in positions.items()}
    return len(toks), TF_JSON.encode(tf), " ".join(parts)


def query_phrases(words: tuple[str, ...], prefix: bool = False) -> tuple[list[list[str]], bool]:
    """A Match's words as phrases of lexemes, all required (FTS5's phrases on SQLite, store/sqlite/
    fts.py): each CJK run of a word the phrase of its bigrams (one character its unigram), the rest
    of the word the phrase of its tokens. Then whether the last phrase ends in a prefix: `prefix`
    and the last word ends in text other than CJK (a CJK run already matches as any substring).
    A prefix token longer than KEPT_BYTES is its first KEPT_BYTES bytes, the part of a long token
    its lexeme begins with."""
    phrases: list[list[str]] = []
    last: list[str] = []
    last_is_word = False
    for word in words:
        for kind, text in query_parts(word) or [("word", word)]:
            pieces = bigrams(text) if kind == "cjk" else [text]
            toks = [t for piece in pieces for t in tokens(piece)]
            if toks:
                phrases.append([lexeme(t) for t in toks])
                last, last_is_word = toks, kind == "word"
    if prefix and last_is_word and len(last[-1]) * 4 > KEPT_BYTES and len(last[-1].encode("utf-8")) > KEPT_BYTES:
        phrases[-1][-1] = _kept(last[-1])
    return phrases, prefix and last_is_word
