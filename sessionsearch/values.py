"""Checks on values a client sends that every layer below must be able to store and send back.

`json.loads` accepts what nothing downstream can handle: an unpaired surrogate (`"\\ud800"`) that
UTF-8 cannot encode, `NaN`/`1e400` that strict JSON cannot carry, and nesting deep enough for the
encoder to hit the interpreter's recursion limit. These checks name the field at fault instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from .errors import InvalidRequest

MAX_JSON_DEPTH = 100  # containers, the outermost object counting as level 1
# Python refuses int <-> decimal conversions past 4,300 digits (about 14,284 bits): such a number
# could be neither stored as JSON text nor sent back
MAX_INT_BITS = 14_000

_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def unpaired_surrogate(text: str) -> str | None:
    """The first unpaired surrogate in `text` as `U+D800`, else None."""
    if text.isascii():  # constant time for ASCII strings: the common case pays nothing
        return None
    found = _SURROGATE.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


def check_text(value: str, field: str) -> str:
    """Return `value` if it holds no unpaired surrogate, else raise InvalidRequest naming `field`."""
    bad = unpaired_surrogate(value)
    if bad is not None:
        raise InvalidRequest(f"{field} contains an unpaired surrogate ({bad})", field=field)
    return value


def optional_text(value: object, field: str) -> str | None:
    """An optional string field: None, or a string check_text() accepts."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"{field} must be a string", field=field)
    return check_text(value, field)


def check_stored_name(value: str, field: str) -> str:
    """check_text(), and no NUL (U+0000): a key, an id or a label is refused with one on every
    store (PostgreSQL's text holds none; message text keeps its NUL on both, store/postgres/lexemes.py)."""
    check_text(value, field)
    if "\x00" in value:
        raise InvalidRequest(f"{field} must not contain NUL (U+0000)", field=field)
    return value


def check_name(value: object, field: str) -> str | None:
    """Return `value` (None when absent) if it is a non-empty string without unpaired surrogates,
    else raise InvalidRequest naming `field`: the rule for the ids a client may name (sessionId,
    messageId)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{field} must be a non-empty string", field=field)
    return check_stored_name(value, field)


def without_nulls(body: dict[str, Any], fields: Iterable[str] | None = None) -> dict[str, Any]:
    """`body` without its null `fields` (every field when None): a null optional field reads as
    absent, so each check after this sees one case, not two. Unknown fields are checked before,
    so that a misspelt field is refused even when null."""
    names = body.keys() if fields is None else set(fields)
    return {k: v for k, v in body.items() if v is not None or k not in names}


def check_json(value: Any, where: str, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise InvalidRequest unless `value` is JSON data that can be stored and answered back:
    text without unpaired surrogates, finite numbers, at most `max_depth` levels of containers.

    Iterative, so that a value nested far past the recursion limit is refused, not a crash.
    """
    if not _clean(value, max_depth):
        _explain(value, where, max_depth)


def _clean(value: Any, max_depth: int) -> bool:
    """Whether `value` certainly passes: the common case, checked without building paths (every
    event of every append and import comes through here). False sends it to _explain."""
    if type(value) is not dict and type(value) is not list:
        return False
    search = _SURROGATE.search
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return False
        if type(item) is dict:
            for key in item:
                if type(key) is not str or (not key.isascii() and search(key)):
                    return False
            children: Iterable[Any] = item.values()
        else:
            children = item
        for child in children:
            kind = type(child)
            if kind is str:
                if not child.isascii() and search(child):
                    return False
            elif kind is dict or kind is list:
                stack.append((child, depth + 1))
            elif kind is int:
                if child.bit_length() > MAX_INT_BITS:
                    return False
            elif kind is float:
                if not math.isfinite(child):
                    return False
            elif child is not None and kind is not bool:
                return False  # tuples, subclasses, anything else: _explain decides
    return True


def _explain(value: Any, where: str, max_depth: int) -> None:
    """Walk `value` again with paths and raise for the first fault, in document order."""
    # each entry: the value, its level, and its path as a linked (parent, segment) pair
    stack: list[tuple[Any, int, tuple[Any, ...] | None]] = [(value, 1, None)]
    while stack:
        item, depth, node = stack.pop()
        if isinstance(item, str):
            bad = unpaired_surrogate(item)
            if bad is not None:
                raise _refuse(where, node, f"contains an unpaired surrogate ({bad})")
        elif isinstance(item, dict):
            if depth > max_depth:
                raise _refuse(where, node, f"nested deeper than {max_depth} levels", shown=6)
            for key in reversed(item):  # reversed onto a stack: the first problem in document order
                if not isinstance(key, str):
                    raise _refuse(where, node, f"field name {key!r} is not a string")
                bad = unpaired_surrogate(key)
                if bad is not None:
                    raise _refuse(where, node, f"has a field name that contains an unpaired surrogate ({bad})")
                stack.append((item[key], depth + 1, (node, key)))
        elif isinstance(item, (list, tuple)):
            if depth > max_depth:
                raise _refuse(where, node, f"nested deeper than {max_depth} levels", shown=6)
            for i in range(len(item) - 1, -1, -1):
                stack.append((item[i], depth + 1, (node, i)))
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise _refuse(where, node, f"must be a finite number, not {item!r}")
        elif isinstance(item, int):  # bool included
            if item.bit_length() > MAX_INT_BITS:
                raise _refuse(where, node, "is a number too large to store")
        elif item is not None:
            raise _refuse(where, node, f"must be JSON data, not {type(item).__name__}")


def _refuse(where: str, node: tuple[Any, ...] | None, problem: str, *, shown: int | None = None) -> InvalidRequest:
    """The error for the value at `node`; `shown` cuts the path in the message to that many
    segments (a path 100 levels deep says less than its first few)."""
    segments = []
    while node is not None:
        node, segment = node
        if isinstance(segment, int):
            segments.append(f"[{segment}]")
        elif _PLAIN_KEY.fullmatch(segment):
            segments.append(f".{segment}")
        else:
            segments.append(f"[{json.dumps(segment)}]")
    segments.reverse()
    path = where + "".join(segments)
    said = path if shown is None or len(segments) <= shown else where + "".join(segments[:shown]) + "…"
    return InvalidRequest(f"{said} {problem}", field=path)
