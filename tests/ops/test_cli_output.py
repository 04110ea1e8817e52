"""What `sessionsearch search` and `history` print for a person, run as a user runs them."""

from __future__ import annotations

import asyncio
import json
import re

from sessionsearch.protocol import AppendParams

from ..helpers import chain, engine_at
from .test_cli import _cli

KEY = "agent:work_bot:tokyo"


def _seed(path) -> None:
    """The demo's work_bot agent in small: 東京 in two of its four messages, タワー in one."""
    async def seed():
        async with engine_at(path) as engine:
            await engine.append(AppendParams(sessionKey=KEY, events=chain("m", [("user", "東京の会議は明日の10時です。"), ("assistant", "東京タワーの近くです。"),
                                                 ("user", "我们明天在北京开会。"), ("assistant", "好的，我会准备材料。")]), sessionId="s1"))
    asyncio.run(seed())


def test_a_hit_whose_score_is_near_zero_prints_its_significant_digits_not_zero(tmp_path):
    """BM25 weighs a text found in half an agent's messages at next to nothing (FTS5 floors its
    inverse document frequency at 1e-6): the score is tiny, not zero, and the JSON keeps it."""
    _seed(tmp_path)
    machine = json.loads(_cli("search", "東京", "--json", data_dir=tmp_path).stdout)
    assert [h["score"] for h in machine["results"]] == [1e-06, 1e-06]
    human = _cli("search", "東京", data_dir=tmp_path)
    assert human.returncode == 0, human.stderr
    assert re.findall(r"score (\S+)", human.stdout) == ["1e-06", "1e-06"]
    rare = _cli("search", "タワー", data_dir=tmp_path)
    score = json.loads(_cli("search", "タワー", "--json", data_dir=tmp_path).stdout)["results"][0]["score"]
    assert re.findall(r"score (\S+)", rare.stdout) == [f"{score:.3g}"] and 0.1 < score < 10


def test_history_around_a_message_that_is_not_there_says_so_and_fails(tmp_path):
    _seed(tmp_path)
    human = _cli("history", KEY, "--message-id", "m9", data_dir=tmp_path)
    assert human.returncode == 2 and human.stdout == ""
    assert "'m9'" in human.stderr and repr(KEY) in human.stderr and "leave out --message-id" in human.stderr
    in_window = _cli("history", KEY, "--message-id", "m9", "--session-id", "s1", data_dir=tmp_path)
    assert in_window.returncode == 2 and "window 's1'" in in_window.stderr
    # the machine output is the API's answer: an empty window around the anchor asked for (SPEC §5)
    machine = _cli("history", KEY, "--message-id", "m9", "--json", data_dir=tmp_path)
    assert machine.returncode == 0
    assert json.loads(machine.stdout) == {"sessionKey": KEY, "sessionId": "s1", "messages": [], "truncated": False,
                                          "totalMessages": 0, "anchorMessageId": "m9", "hasOlder": False,
                                          "hasNewer": False}
    found = _cli("history", KEY, "--message-id", "m2", "--limit", "1", data_dir=tmp_path)
    assert found.returncode == 0 and "東京タワーの近くです。" in found.stdout
