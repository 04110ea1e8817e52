"""Text rules at the bottom of the package, importing nothing else of it: the tokens both stores
index and match by (unicode61.py, FTS5's `unicode61 remove_diacritics 2`), the CJK index form
(cjk.py) and lengths in UTF-16 code units (utf16.py)."""
