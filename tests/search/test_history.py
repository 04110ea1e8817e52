"""sessions.history (SPEC §5): tail paging, anchors, reset intervals, errors and bounds."""

from __future__ import annotations

import json

import pytest

from sessionsearch import InvalidRequest, NotFound
from sessionsearch.protocol import AppendParams, HistoryParams

from ..helpers import chain, engine_at, msg, reset

KEY = "agent:main:main"


def mids(result: dict) -> list[str]:
    return [m["messageId"] for m in result["messages"]]


async def _reset_session(engine):
    """a1..a3, reset r1 keeping a3, b1..b3, reset r2 keeping nothing, c1..c2."""
    await engine.append(AppendParams(sessionKey=KEY, events=chain("a", [("user", "a one"), ("assistant", "a two"), ("user", "a three")]), sessionId="s1"))
    await engine.append(AppendParams(sessionKey=KEY, events=[reset("r1", "a3", kept="a3"),
                              *chain("b", [("user", "b one"), ("assistant", "b two"), ("user", "b three")], "r1")]))
    await engine.append(AppendParams(sessionKey=KEY, events=[reset("r2", "b3"), *chain("c", [("user", "c one"), ("assistant", "c two")], "r2")]))


async def test_tail_is_the_newest_messages_of_the_current_view_in_order(backend):
    async with engine_at(backend) as engine:
        await _reset_session(engine)
        result = await engine.history(HistoryParams(sessionKey=KEY))
        assert mids(result) == ["c1", "c2"]
        assert result["totalMessages"] == 2 and result["hasMore"] is False
        assert result["messages"][0] == {"messageId": "c1", "sessionId": "s1", "role": "user",
                                         "content": "c one", "timestamp": result["messages"][0]["timestamp"]}


async def test_kept_rows_are_in_the_current_view(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("a", [("user", "a one"), ("assistant", "a two"), ("user", "a three")])))
        await engine.append(AppendParams(sessionKey=KEY, events=[reset("r1", "a3", kept="a2"), msg("b1", "user", "b one", "r1")]))
        assert mids(await engine.history(HistoryParams(sessionKey=KEY))) == ["a2", "a3", "b1"]


async def test_offset_paging_reaches_the_start_of_the_view(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", f"line {i}") for i in range(1, 26)])))
        seen, offset = [], 0
        while True:
            page = await engine.history(HistoryParams(sessionKey=KEY, limit=10, offset=offset))
            seen = mids(page) + seen
            assert page["offset"] == offset
            if not page["hasMore"]:
                break
            offset = page["nextOffset"]
        assert seen == [f"m{i}" for i in range(1, 26)]


async def test_an_anchor_grows_alternately_older_and_newer(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", f"line {i}") for i in range(1, 11)])))
        result = await engine.history(HistoryParams(sessionKey=KEY, messageId="m5", limit=4))
        assert mids(result) == ["m3", "m4", "m5", "m6"]
        assert result["hasOlder"] is True and result["hasNewer"] is True
        edge = await engine.history(HistoryParams(sessionKey=KEY, messageId="m1", limit=3))
        assert mids(edge) == ["m1", "m2", "m3"]


async def test_an_anchor_in_the_current_view_may_include_later_turns(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("a", [("user", "a one"), ("assistant", "a two")])))
        await engine.append(AppendParams(sessionKey=KEY, events=[reset("r1", "a2", kept="a2"), msg("b1", "user", "b one", "r1")]))
        assert mids(await engine.history(HistoryParams(sessionKey=KEY, messageId="a2", limit=10))) == ["a2", "b1"]


async def test_an_anchor_outside_the_current_view_reads_its_closed_interval(backend):
    async with engine_at(backend) as engine:
        await _reset_session(engine)
        first = await engine.history(HistoryParams(sessionKey=KEY, messageId="a1", limit=50))
        assert mids(first) == ["a1", "a2", "a3"]
        middle = await engine.history(HistoryParams(sessionKey=KEY, messageId="b2", sessionId="s1", limit=50))
        assert mids(middle) == ["a3", "b1", "b2", "b3"]  # a3 was kept by r1; never c1, c2


async def test_a_missing_or_off_branch_anchor_gives_empty_history(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "one"), ("user", "two")])))
        await engine.append(AppendParams(sessionKey=KEY, events=[{"type": "leaf", "id": "l1", "parentId": "m2", "targetId": "m1"},
                                  msg("n2", "user", "other", "l1")]))
        assert mids(await engine.history(HistoryParams(sessionKey=KEY, messageId="nope"))) == []
        assert mids(await engine.history(HistoryParams(sessionKey=KEY, messageId="m2"))) == []
        assert mids(await engine.history(HistoryParams(sessionKey=KEY, messageId="n2"))) == ["m1", "n2"]


async def test_history_argument_errors(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "one")]), sessionId="s1"))
        with pytest.raises(InvalidRequest, match="^sessionId requires messageId$"):
            await engine.history(HistoryParams(sessionKey=KEY, sessionId="s1"))
        with pytest.raises(InvalidRequest, match="^offset and messageId cannot be used together$"):
            await engine.history(HistoryParams(sessionKey=KEY, messageId="m1", offset=0))
        with pytest.raises(InvalidRequest, match="not a window"):
            await engine.history(HistoryParams(sessionKey=KEY, messageId="m1", sessionId="elsewhere"))
        for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}):
            with pytest.raises(InvalidRequest):
                await engine.history(HistoryParams.of({"sessionKey": KEY, **bad}))
        with pytest.raises(NotFound):
            await engine.history(HistoryParams(sessionKey="agent:main:absent"))


async def test_tool_messages_only_with_include_tools(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=[msg("u", "user", "q", None), msg("t", "toolResult", "tool output", "u"),
                                  msg("a", "assistant", "answer", "t")]))
        assert mids(await engine.history(HistoryParams(sessionKey=KEY))) == ["u", "a"]
        assert mids(await engine.history(HistoryParams(sessionKey=KEY, includeTools=True))) == ["u", "t", "a"]


async def test_long_text_is_cut_and_huge_rows_are_replaced(backend):
    async with engine_at(backend) as engine:
        blocks = [{"type": "image", "data": "x" * 60_000}]
        await engine.append(AppendParams(sessionKey=KEY, events=[msg("long", "user", "y" * 5000, None), msg("huge", "user", blocks, "long"),
                                  msg("small", "user", "fine", "huge")]))
        result = await engine.history(HistoryParams(sessionKey=KEY))
        long, huge, small = result["messages"]
        assert long["content"] == "y" * 4000 + "\n…(truncated)…"
        assert huge["content"] == "[sessions_history omitted: message too large]"
        assert small["content"] == "fine" and result["truncated"] is True


async def test_responses_stay_within_80_kib_and_paging_skips_nothing(backend):
    async with engine_at(backend) as engine:
        await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", f"{i} " + "z" * 3990) for i in range(1, 61)])))
        seen, offset, pages = [], 0, 0
        while True:
            page = await engine.history(HistoryParams(sessionKey=KEY, limit=1000, offset=offset))
            assert len(json.dumps(page, ensure_ascii=False).encode()) <= 80 * 1024
            seen = mids(page) + seen
            pages += 1
            if not page["hasMore"]:
                break
            offset = page["nextOffset"]
        assert seen == [f"m{i}" for i in range(1, 61)] and pages > 1


def marks(result: dict) -> list[tuple]:
    return [(m["resetId"], m["afterMessageId"], m["beforeMessageId"]) for m in result["resets"]]


async def test_history_names_where_resets_fall_among_the_messages_it_returns(tmp_path):
    async with engine_at(tmp_path) as engine:
        await _reset_session(engine)
        # the current view: the reset that opened it, before its first message
        assert marks(await engine.history(HistoryParams(sessionKey=KEY))) == [("r2", None, "c1")]
        # a kept row's view: kept a3, the reset after it, then b1..b3; r2 closes it at the end
        middle = await engine.history(HistoryParams(sessionKey=KEY, messageId="b2"))
        assert mids(middle) == ["a3", "b1", "b2", "b3"]
        assert marks(middle) == [("r1", "a3", "b1"), ("r2", "b3", None)]
        # the first view ends at r1; a smaller window names only resets next to what it returned
        assert marks(await engine.history(HistoryParams(sessionKey=KEY, messageId="a1"))) == [("r1", "a3", None)]
        assert marks(await engine.history(HistoryParams(sessionKey=KEY, messageId="a1", limit=2))) == []
        # a session that was never reset has no marks
        await engine.append(AppendParams(sessionKey="agent:main:plain", events=chain("p", [("user", "p one"), ("assistant", "p two")])))
        assert marks(await engine.history(HistoryParams(sessionKey="agent:main:plain", messageId="p1"))) == []
