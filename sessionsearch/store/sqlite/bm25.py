"""FTS5's BM25 as this package recomputes it (postings and score bounds): its constants, and the
averages record FTS5 keeps of row lengths, decoded."""

from __future__ import annotations

K1, B = 1.2, 0.75  # FTS5's bm25() defaults
EPS = 1e-9  # relative; far above the rounding difference between this score and FTS5's own


def varint(buf: bytes, i: int) -> tuple[int, int]:
    """SQLite's varint at buf[i] (big-endian groups of 7 bits; a 9th byte gives 8): (value, next i)."""
    value = 0
    for _ in range(8):
        byte = buf[i]
        i += 1
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, i
    return (value << 8) | buf[i], i + 1


def varint_sum(blob: bytes, start: int = 0) -> int:
    if blob and max(blob) < 0x80:  # every varint one byte (a row's sizes under 128 tokens): in C
        return sum(blob[start:])
    i, total = start, 0
    while i < len(blob):
        n, i = varint(blob, i)
        total += n
    return total


def average_length(averages: bytes) -> float:
    """FTS5's average row length in tokens, from its averages record (rows, then tokens per column)."""
    rows, i = varint(averages, 0)
    return varint_sum(averages, i) / rows if rows else 1.0
