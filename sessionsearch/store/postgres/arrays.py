"""Arrays of rows' columns in PostgreSQL's binary array format, built in one pass each.

The writes send their rows as arrays (`INSERT … SELECT FROM unnest(…)`, writer.py). psycopg's own
binary list dumper looks up a dumper for every element and packs each one apart: a quarter of an
append's client CPU. These build the same bytes (what `array_recv` reads: dimensions, then each
element's length, -1 for NULL, and its bytes) from one `struct` format per array; the connection
learns to send them by `register` (the pool's `configure`).
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import Any

from psycopg import AsyncConnection
from psycopg.adapt import Dumper
from psycopg.pq import Format

_HEAD = "!iiiii"  # dimensions (1), has NULLs, element type, length, lower bound (1)
_LEN = struct.Struct("!i")


class _Array(bytes):
    """An array, already in binary form; the subclass says of what."""

    __slots__ = ()
    OID = 0


class Int8Array(_Array):
    __slots__ = ()
    OID, ELEMENT, CODE, SIZE = 1016, 20, "q", 8


class Int4Array(_Array):
    __slots__ = ()
    OID, ELEMENT, CODE, SIZE = 1007, 23, "i", 4


class TextArray(_Array):
    __slots__ = ()
    OID, ELEMENT = 1009, 25


@lru_cache(maxsize=64)
def _fixed(code: str, n: int) -> struct.Struct:
    return struct.Struct(_HEAD + ("i" + code) * n)


def ints(kind: type[Int8Array] | type[Int4Array], values: list[int | None]) -> _Array:
    """Integers (None: NULL) as a binary array of `kind`; out of its range: struct.error."""
    n = len(values)
    if None not in values:
        size = kind.SIZE
        return kind(_fixed(kind.CODE, n).pack(1, 0, kind.ELEMENT, n, 1, *[x for v in values for x in (size, v)]))
    parts, args = [_HEAD], [1, 1, kind.ELEMENT, n, 1]
    for v in values:
        if v is None:
            parts.append("i")
            args.append(-1)
        else:
            parts.append("i" + kind.CODE)
            args += (kind.SIZE, v)
    return kind(struct.pack("".join(parts), *args))


def texts(values: list[str | None]) -> TextArray:
    """Strings (None: NULL) as a binary text[] array (UTF-8, the connections' encoding)."""
    out = [struct.pack(_HEAD, 1, int(None in values), TextArray.ELEMENT, len(values), 1)]
    pack = _LEN.pack
    for v in values:
        if v is None:
            out.append(b"\xff\xff\xff\xff")
        else:
            b = v.encode("utf-8")
            out += (pack(len(b)), b)
    return TextArray(b"".join(out))


def _dumper(kind: type[_Array]) -> type[Dumper]:
    class ArrayDumper(Dumper):
        format = Format.BINARY
        oid = kind.OID

        def dump(self, obj: _Array) -> bytes:
            return obj

    return ArrayDumper


_DUMPERS = {kind: _dumper(kind) for kind in (Int8Array, Int4Array, TextArray)}


async def register(conn: AsyncConnection) -> None:
    """Let `conn` send these arrays (a pool's `configure`)."""
    for kind, dumper in _DUMPERS.items():
        conn.adapters.register_dumper(kind, dumper)


def columns(kinds: tuple[type[_Array], ...], values: list[list[Any]]) -> list[Any]:
    """Each column of `values` as a binary array of its kind; all of them as lists (psycopg's
    own dumping, and its errors) if one does not fit its kind."""
    try:
        return [texts(col) if kind is TextArray else ints(kind, col)  # type: ignore[arg-type]  # an int kind
                for kind, col in zip(kinds, values)]
    except (struct.error, AttributeError):
        return values
