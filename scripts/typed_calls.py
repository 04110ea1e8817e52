"""Rewrite calls of the engine's old wire-keyword methods to its typed ones (a one-off, kept to review by).

    engine.search(query="x", limit=5)        ->  engine.search(SearchParams(query="x", limit=5))
    engine.search(body, agent_facing=True)   ->  engine.search(SearchParams.of(body), agent_facing=True)
    engine.append(KEY, events, sessionId=s)  ->  engine.append(AppendParams(sessionKey=KEY, events=events, sessionId=s))
    engine.history(sessionKey=KEY)           ->  engine.history(HistoryParams(sessionKey=KEY))
    engine.delete(KEY)                       ->  engine.delete(SessionRef(sessionKey=KEY))
    engine.call(method, body)                ->  call(engine, method, body)

Usage: python scripts/typed_calls.py FILE...  (then `ruff check --fix` sorts the imports it adds)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

RECEIVERS = {"engine", "reader_engine", "oracle_engine", "self.engine", "serving", "writer", "e", "w", "other",
             "other_process", "lite", "post", "again", "importer", "fresh"}
# method: (its request class, the wire names of its positional arguments, the keywords that stay the engine's)
METHODS = {
    "search": ("SearchParams", [], {"agent_facing", "time_limit_ms"}),
    "history": ("HistoryParams", [], {"restore"}),
    "list_sessions": ("ListParams", [], set()),
    "index_status": ("StatusParams", ["agentId"], set()),
    "upsert_session": ("UpsertParams", ["sessionKey"], set()),
    "append": ("AppendParams", ["sessionKey", "events"], {"index"}),
    "rotate": ("RotateParams", ["sessionKey", "sessionId", "reason"], set()),
    "delete": ("SessionRef", ["sessionKey"], set()),
    "archive": ("SessionRef", ["sessionKey"], set()),
    "restore": ("SessionRef", ["sessionKey"], set()),
}


def _rewrite(src: str, call: ast.Call, receiver: str, method: str) -> tuple[str, str] | None:
    """The call's new text and the name it needs imported, or None when it is not an engine call."""
    seg = lambda node: ast.get_source_segment(src, node)  # noqa: E731
    if method == "call":
        return f"call({receiver}, {', '.join(seg(a) for a in call.args)})", "call"
    cls, positional, engine_kws = METHODS[method]
    first = call.args[0] if call.args else None
    if isinstance(first, ast.Call) and (seg(first.func) or "").split(".")[0] in {c for c, _, _ in METHODS.values()}:
        return None  # already a typed call
    if method == "append" and len(call.args) < 2 and not any(k.arg == "events" for k in call.keywords):
        return None  # a list's append
    if method in ("search", "history") and len(call.args) > 1:
        return None
    if len(call.args) > max(len(positional), 1):
        return None
    wire: list[str] = []
    body: str | None = None
    for i, arg in enumerate(call.args):
        if i < len(positional):
            wire.append(f"{positional[i]}={seg(arg)}")
        else:
            body = seg(arg)  # search/history/list: the wire body
    spreads: list[str] = []
    kept: list[str] = []
    for kw in call.keywords:
        if kw.arg is None:
            spreads.append(seg(kw.value))
        elif kw.arg in engine_kws:
            kept.append(f"{kw.arg}={seg(kw.value)}")
        else:
            wire.append(f"{kw.arg}={seg(kw.value)}")
    if not wire and body is None and not spreads:
        if method in ("list_sessions", "index_status"):
            return None  # no request: the method's default
        params = f"{cls}()"
    elif body is None and not spreads:
        params = f"{cls}({', '.join(wire)})"
    else:
        items = [f"**{body}"] if body is not None else []
        items += [f'"{w.split("=", 1)[0]}": {w.split("=", 1)[1]}' for w in wire] + [f"**{s}" for s in spreads]
        params = f"{cls}.of({body})" if len(items) == 1 and body is not None else f"{cls}.of({{{', '.join(items)}}})"
    return f"{receiver}.{method}({', '.join([params, *kept])})", cls


def rewrite(path: Path) -> int:
    src = path.read_text()
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    needed: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.attr
        receiver = ast.get_source_segment(src, node.func.value)
        if receiver not in RECEIVERS or (method not in METHODS and method != "call"):
            continue
        done = _rewrite(src, node, receiver, method)
        if done is None:
            continue
        assert node.end_lineno is not None and node.end_col_offset is not None
        start = offsets[node.lineno - 1] + len(lines[node.lineno - 1].encode()[:node.col_offset].decode())
        end = offsets[node.end_lineno - 1] + len(lines[node.end_lineno - 1].encode()[:node.end_col_offset].decode())
        edits.append((start, end, done[0]))
        needed.add(done[1])
    if not edits:
        return 0
    edits.sort()
    outer: list[tuple[int, int, str]] = []
    for start, end, text in edits:  # an engine call inside another's arguments: the outer one only
        if outer and start < outer[-1][1]:
            continue
        outer.append((start, end, text))
    for start, end, text in reversed(outer):
        src = src[:start] + text + src[end:]
    imports = []
    params = sorted(n for n in needed if n != "call")
    if params:
        imports.append(f"from sessionsearch.protocol import {', '.join(params)}\n")
    if "call" in needed:
        imports.append("from sessionsearch.api.tools import call\n")
    at = src.index("\n\n", src.index("from __future__")) + 2 if "from __future__" in src else 0
    src = src[:at] + "".join(imports) + src[at:]
    path.write_text(src)
    return len(outer)


if __name__ == "__main__":
    total = sum(rewrite(Path(name)) for name in sys.argv[1:])
    print(f"{total} calls rewritten")
