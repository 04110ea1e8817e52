"""What PostgreSQL indexes of a message, and how a search's words become a tsquery.

PostgreSQL never tokenizes anything here: a message's tokens are text.py's `tokens()` (the
folding and splitting of SQLite's `unicode61 remove_diacritics 2`), computed in Python, of its
index form (store/cjk.py: each CJK run as its bigrams then its unigrams), whose CJK run
characters stay as they are, as unicode61 keeps them. The row keeps a tsvector of those lexemes
with their positions (for the GIN index and phrases), their counts (tf, jsonb: exact, where a
tsvector keeps at most 256 positions of a lexeme) and the row's length in tokens (dl): what BM25
needs. The tsvector is written as a tsvector literal of our own
lexemes, each quoted; a search's words become a tsquery assembled in SQL from bound arrays
(search.py), so no user text is ever read as tsquery syntax.

A query word is a phrase of its tokens, as FTS5 reads a quoted string (`per-session` is `per`
then `session`); each CJK run in it is a phrase of its own, of the run's bigrams (store/sqlite/
fts.py makes the same phrases for FTS5).

Limits of tsvector: a lexeme holds at most 2,047 bytes, so a longer token is stored and searched
as `~` and its SHA-256 (no real token looks like that: tokens are letters and digits), and
matches as a whole word, never as a prefix; positions stop at 16,383, so phrases
(never single words) are found only within a message's first 16,383 tokens; and a tsvector holds
at most 1 MB of lexemes, so distinct tokens past MAX_LEXEME_BYTES are left out of the index.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections import Counter
from functools import lru_cache

from ...search.text import is_token_char
from ..cjk import bigrams, fold, needs_fold, query_parts, shadow, split_runs

MAX_TOKEN_BYTES = 2046
MAX_LEXEME_BYTES = 900_000
MAX_POS = 16383  # tsvector's highest position
MAX_POSITIONS = 256  # positions a tsvector keeps per lexeme
FAST_CHARS = MAX_TOKEN_BYTES // 4  # ASCII text this short has no token past MAX_TOKEN_BYTES
ASCII_TOKEN = re.compile(r"[a-z0-9]+")  # tokens() of lowercased ASCII text (their parity is tested)
TF_JSON = json.JSONEncoder(ensure_ascii=False)  # json.dumps with an option makes an encoder per call


# Below this code point every character is classified one by one (letters and marks of every
# script in use); above it are CJK ideographs (letters), private use and unassigned code points,
# which `[^\W_]` and the private-use ranges classify the same (tests/test_postgres_text.py checks
# all of Unicode).
SCANNED = 0x20000
PRIVATE_USE = "\U000f0000-\U000ffffd\U00100000-\U0010fffd"


def _ranges(keep, end: int = SCANNED) -> str:
    """A regex class body of the code points from 0x80 below `end` that `keep` holds."""
    out, start = [], None
    for cp in range(0x80, end + 1):
        ok = cp < end and not 0xD800 <= cp <= 0xDFFF and keep(chr(cp))
        if ok and start is None:
            start = cp
        elif not ok and start is not None:
            out.append(f"{re.escape(chr(start))}-{re.escape(chr(cp - 1))}")
            start = None
    return "".join(out)


@lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str], frozenset[str]]:
    """(a run of token characters in BMP-only text, one in any text, a combining mark of the BMP,
    those beyond it): built once, on the first message indexed. A class of BMP characters only
    is a bitmap to the regex engine; one with astral ranges is tested range by range (10-30x
    slower), so text without astral characters (most) is split with the first."""
    low, every = _ranges(is_token_char, 0x10000), _ranges(is_token_char)
    bmp = f"\\w{low}"
    astral = f"{every[len(low):]}\U000e0100-\U000e01ef{PRIVATE_USE}"
    # \\w holds `_`, split on afterwards: one class costs a third of an alternation per character
    return (re.compile(f"[{bmp}]+"), re.compile(f"(?:[{bmp}]|[{astral}])+"),
            re.compile(f"[{_ranges(unicodedata.combining, 0x10000)}]+"),
            frozenset(chr(cp) for cp in range(0x10000, SCANNED) if unicodedata.combining(chr(cp))))


def fold_run(run: str, combining: re.Pattern[str], astral: frozenset[str]) -> str:
    """fold() of a run of token characters: NFD, combining marks dropped, case folded (the same
    as text.fold_char character by character: NFD only reorders the marks it drops); but CJK runs
    (store/cjk.py) stay as they are, as unicode61 keeps them: `ガ` is not `カ`, `한` not its jamo."""
    if run.isascii():
        return run.lower()
    if max(run) >= "\u1100":  # may hold CJK
        parts = split_runs(run)
        if len(parts) > 1:
            return "".join(p if i % 2 else _fold_other(p, combining, astral) for i, p in enumerate(parts))
    return _fold_other(run, combining, astral)


def _fold_other(run: str, combining: re.Pattern[str], astral: frozenset[str]) -> str:
    if run.isascii():
        return run.lower()
    nfd = combining.sub("", unicodedata.normalize("NFD", run))
    if max(nfd, default="") > "\uffff":
        nfd = "".join(ch for ch in nfd if ch not in astral)
    return nfd.casefold()


def tokens(text: str) -> list[str]:
    """text.py's `tokens()` at a regex's speed (their parity is tested)."""
    bmp, anywhere, combining, astral = _patterns()
    runs = (anywhere if max(text, default="") > "\uffff" else bmp).findall(text)
    return [t for t in (fold_run(part, combining, astral) for r in runs for part in r.split("_")) if t]


def index_tokens(text: str) -> list[str]:
    """`tokens(cjk.index_text(text))`, without tokenizing the shadow tokens one by one: each run's
    bigrams and unigrams are its tokens as they stand (a tenth of the time on CJK text)."""
    if text.isascii():  # most messages: ASCII letters and digits are the token characters
        return ASCII_TOKEN.findall(text.lower())
    if not needs_fold(text):
        return tokens(text)
    out: list[str] = []
    for i, piece in enumerate(split_runs(fold(text))):
        if i % 2:
            out += shadow(piece).split(" ")
        elif piece:
            out += tokens(piece)
    return out


def lexeme(token: str) -> str:
    """The lexeme a token is stored and searched as."""
    if len(token) * 4 <= MAX_TOKEN_BYTES or len(token.encode("utf-8")) <= MAX_TOKEN_BYTES:
        return token
    return "~" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def quote(lex: str) -> str:
    """A lexeme as tsvector/tsquery input reads it literally: single-quoted, quotes and backslashes doubled."""
    return "'" + lex.replace("\\", "\\\\").replace("'", "''") + "'"


def index_fields(text: str) -> tuple[int, str, str]:
    """(dl, tf as JSON, tsvector literal) of a message's text: the tokens of its index form
    (store/cjk.py: each CJK run as its bigrams then its unigrams, at consecutive positions).

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
    and the last word ends in text other than CJK (a CJK run already matches as any substring)."""
    phrases: list[list[str]] = []
    last_is_word = False
    for word in words:
        for kind, text in query_parts(word) or [("word", word)]:
            pieces = bigrams(text) if kind == "cjk" else [text]
            phrase = [lexeme(t) for piece in pieces for t in tokens(piece)]
            if phrase:
                phrases.append(phrase)
                last_is_word = kind == "word"
    return phrases, prefix and last_is_word
