"""The index checked by content, for the fault tests: its rows read from an agent database, the
rows the events' active branch should give (an oracle replayed from the events themselves), a
rebuild from scratch to compare with, and a gateway state dir with an imported backlog to fault."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sessionsearch.store.rowids import wid_sql

from ..helpers import BASE_TS, engine_at
from ..store.test_index_invariant import Window

# -- the index, by content -------------------------------------------------------------------------

def _by_window(rows) -> dict[int, set[tuple]]:
    out: dict[int, set[tuple]] = {}
    for wid, *row in rows:
        out.setdefault(wid, set()).add(tuple(row))
    return out


def index_rows(db: Path) -> dict[int, set[tuple]]:
    """Every index row as (rowid, text, ts, message id), by window."""
    with closing(sqlite3.connect(db)) as conn:
        return _by_window(conn.execute(f"SELECT {wid_sql('rowid')}, rowid, text, ts, mid FROM msg_fts"))


def assert_index_invariant(db: Path) -> int:
    """ARCHITECTURE.md's invariant: every window not marked dirty holds exactly one index row per
    active-branch user/assistant message with text, with its text, timestamp and id, and nothing
    else; no index row belongs to a window that is gone or cold. Returns the rows compared."""
    with closing(sqlite3.connect(db)) as conn:
        windows = dict(conn.execute("SELECT wid, needs_rebuild = 0 AND cold = 0 FROM windows"))
        branch = _by_window(conn.execute("SELECT wid, id, text, ts, event_id FROM events "
                                         "WHERE on_branch = 1 AND text IS NOT NULL"))
    index = index_rows(db)
    assert set(index) <= set(windows), f"index rows of windows that are gone: {set(index) - set(windows)}"
    compared = 0
    for wid, clean in windows.items():
        if clean:
            assert index.get(wid, set()) == branch.get(wid, set()), f"window {wid} of {db.name}"
            compared += len(branch.get(wid, ()))
    return compared


def _text(content) -> str:
    if isinstance(content, str):
        return content.strip()
    return "\n".join(b["text"] for b in content if b.get("type") == "text")


def expected_rows(events: list[dict]) -> set[tuple]:
    """(message id, role, text, ts) of the active branch's user/assistant messages with text,
    replayed from the events themselves (the property test's oracle), not from the store."""
    out = set()
    for e in Window("oracle", events).active():
        m = e.get("message")
        if e["type"] == "message" and m["role"] in ("user", "assistant") and _text(m["content"]):
            out.add((e["id"], m["role"], _text(m["content"]), _event_ms(e["timestamp"])))
    return out


def _event_ms(stamp: int | str) -> int:
    """An event's `timestamp` (epoch ms, or ISO as tests/helpers.py writes it) as epoch ms."""
    if isinstance(stamp, int):
        return stamp
    return (datetime.fromisoformat(stamp) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def found_rows(db: Path) -> dict[str, set[tuple]]:
    """The index rows as (message id, role, text, ts), by session id."""
    with closing(sqlite3.connect(db)) as conn:
        sessions = dict(conn.execute("SELECT wid, session_id FROM windows"))
    return {sessions[wid]: {(mid, "assistant" if rid & 1 else "user", text, ts) for rid, text, ts, mid in rows}
            for wid, rows in index_rows(db).items()}


async def rebuilt_from_scratch(db: Path, into: Path) -> dict[int, set[tuple]]:
    """The index rows a full rebuild gives: a copy of the database with its index emptied and every
    window marked, reconciled in this process (by executemany, where workers insert by SQL)."""
    (into / "agents").mkdir(parents=True)
    copy = into / "agents" / db.name
    with closing(sqlite3.connect(db)) as src, closing(sqlite3.connect(copy)) as dst:
        src.backup(dst)
    with closing(sqlite3.connect(copy, isolation_level=None)) as conn:
        conn.execute("DELETE FROM msg_fts")
        conn.execute("UPDATE windows SET needs_rebuild = 1, rebuild_gen = rebuild_gen + 1, claim_token = NULL, "
                     "claim_expires_at = NULL")
    async with engine_at(into) as engine:
        await engine.reconcile_pending()
    return index_rows(copy)


# -- an imported backlog ---------------------------------------------------------------------------

def write_backlog(root: Path, sizes: list[int], *, words: int = 4, first: int = 0) -> dict[str, list[dict]]:
    """A gateway state dir, one window per size (session ids w<first>, w<first + 1>, …): user and
    assistant turns, tool results, thinking blocks, and in every other window a rewind partway (so
    the active branch is not every row). Returns each window's events by session id."""
    folder = root / "agents" / "main" / "sessions"
    folder.mkdir(parents=True)
    index, out = {}, {}
    filler = " ".join(f"word{k}" for k in range(words))
    for n, size in enumerate(sizes, first):
        sid = f"w{n}"
        events, parent = [], None
        for i in range(size):
            role = "toolResult" if i % 7 == 6 else ("user" if i % 2 == 0 else "assistant")
            content = f"w{n} row {i} topic{i % 97} {filler}"
            if role == "assistant" and i % 11 == 5:
                content = [{"type": "text", "text": content}, {"type": "thinking", "thinking": "never indexed"}]
            # the event's time (a hit's, SPEC §2) after the message's own, as the runtime writes them
            events.append({"type": "message", "id": f"w{n}m{i}", "parentId": parent, "timestamp": BASE_TS + i,
                           "message": {"role": role, "content": content, "timestamp": BASE_TS + i - 1}})
            parent = f"w{n}m{i}"
            if n % 2 == 0 and size >= 10 and i == size * 3 // 5:
                events.append({"type": "leaf", "id": f"w{n}l", "parentId": parent, "targetId": f"w{n}m{size * 2 // 5}"})
                parent = f"w{n}l"
        (folder / f"{sid}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        index[f"agent:main:w{n}"] = {"sessionId": sid}
        out[sid] = events
    (folder / "sessions.json").write_text(json.dumps(index))
    return out
