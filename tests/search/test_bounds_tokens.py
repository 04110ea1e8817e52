"""The writer keeps the score bounds by the tokens it counts in Python (store/sqlite/bounds.py
`fts_tokens`: a regex on ASCII text, the unicode61 port otherwise): they must be FTS5's own,
term for term and count for count, or a bound could miss a term FTS5 indexed."""

from __future__ import annotations

import random
import sqlite3
from collections import Counter

from sessionsearch.store.sqlite.bounds import fts_tokens, token_counts
from sessionsearch.text.cjk import index_text

SAMPLES = [
    "Hello, World! it's 42-times_faster (v2.0) e-mail@host.org",
    "Café CAFÉ naïve résumé Über straße ß ﬁnance Ångström łódź ação",
    "東京で会議 明日の予定は? 北京上海",
    "안녕하세요 회의 내일",
    "ΐ Ελληνικά ΣΊΣΥΦΟΣ ς İstanbul ıi Ǆemal",
    "e\u0301 a\u0300b \u0301x x\u0301 \u00a0nbsp\u2003em\u3000ideo",
    "tab\there\nnewline\r\n\x00nul\x1fus émoji 😀 done",
    "snake_case camelCase KEBAB-case 3.14159 1e10 0xFF",
    "देवनागरी हिन्दी العربية עברית",
    "",
    "   ...   ",
]
ALPHABET = "aZ09 ,.-_'\"é É ü ß ﬁ 東京会議 안녕 Σς ΐ \u0301\u0300 \u00a0\t\n😀 x"


def _fts5_counts(texts: list[str]) -> list[Counter[str]]:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5 (text, tokenize = 'unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE tv USING fts5vocab(t, 'instance')")
    conn.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", enumerate(texts, 1))
    out: list[Counter[str]] = [Counter() for _ in texts]
    for term, doc in conn.execute("SELECT term, doc FROM tv"):
        out[doc - 1][term] += 1
    return out


def test_the_writers_tokens_are_fts5s_on_varied_text_and_its_index_form():
    rnd = random.Random(7)
    random_texts = ["".join(rnd.choices(ALPHABET, k=rnd.randint(0, 60))) for _ in range(400)]
    texts = SAMPLES + random_texts
    texts += [index_text(t) for t in texts]  # the CJK index form is what FTS5 tokenizes
    assert token_counts(texts) == _fts5_counts(texts)


def test_ascii_and_the_port_agree_in_order():
    for text in SAMPLES:
        conn = sqlite3.connect(":memory:")
        conn.execute("CREATE VIRTUAL TABLE t USING fts5 (text, tokenize = 'unicode61 remove_diacritics 2')")
        conn.execute("CREATE VIRTUAL TABLE tv USING fts5vocab(t, 'instance')")
        conn.execute("INSERT INTO t (rowid, text) VALUES (1, ?)", (text,))
        assert fts_tokens(text) == [t for (t,) in conn.execute("SELECT term FROM tv ORDER BY offset")], text
