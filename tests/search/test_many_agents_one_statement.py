"""A relevance search of many agents on PostgreSQL is one statement of them all (store/postgres/
search_many.py): each hit scored exactly as its agent's own search scores it (BM25 over that
agent's corpus, to the last bit), the answer exactly the merge of every agent's full answer, ties
through the cut included, and every agent's head read (windows needing reconciliation)."""

from __future__ import annotations

import math
import random

import psycopg
import pytest

from sessionsearch.protocol import AppendParams, SearchParams
from sessionsearch.store.base import Match
from sessionsearch.store.postgres.query import DfCache
from sessionsearch.store.rowids import wid_of

from ..helpers import BASE_TS, engine_at, timed

AGENTS = [f"b{i:02d}" for i in range(16)]
WORDS = ["amber", "birch", "cedar", "delta", "ember"]


@pytest.mark.parametrize("order", ["relevance", "recent"])
async def test_each_hit_scores_as_its_agents_own_search_to_the_last_bit(pg, order):
    rnd = random.Random(28)
    async with engine_at(pg) as engine:
        ts = BASE_TS
        for agent in AGENTS:  # corpora of different sizes and lengths: each agent its own N, avgdl, df
            items = []
            for _ in range(rnd.randint(3, 30)):
                ts += 1000
                words = [w for w in WORDS if rnd.random() < 0.4] + ["pad"] * rnd.randint(0, 12)
                rnd.shuffle(words)
                items.append(("user", " ".join(words) or "pad", ts))
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"{agent}m", items)))
        stores = [await engine.store(a) for a in AGENTS]
        for match in [Match(("amber",)), Match(("birch", "cedar")), Match(("de",), prefix=True),
                      Match(("cedar", "em"), prefix=True), Match(("amber birch",))]:
            await engine.backend.search_top_many(stores, match, k=200, order=order, exclude=[], role=None,
                                                 since=None, until=None, deadline=math.inf)
            # again, with every agent's head and counts kept: taken, not read again
            many = await engine.backend.search_top_many(stores, match, k=200, order=order, exclude=[], role=None,
                                                        since=None, until=None, deadline=math.inf)
            assert many is not None
            found = 0
            for store, top in zip(stores, many, strict=True):
                async with store.reader() as reader:
                    own = await store.search_top(reader, match, k=200, order=order, include=None,
                                                 exclude=None, role=None)
                assert sorted((h.row_id, h.score, h.message_id, h.ts, h.text) for h in top.hits) == sorted(
                    (h.row_id, h.score, h.message_id, h.ts, h.text) for h in own.hits), (match, store.agent_id)
                assert top.meta_version == own.meta_version and top.dirty == own.dirty
                found += len(top.hits)
            assert found >= (1 if " " in match.words[0] else len(AGENTS)), match  # the words are in many agents


async def test_a_sparse_recent_search_reads_only_the_agents_of_its_newest_rows(pg):
    async with engine_at(pg) as engine:
        for i, agent in enumerate(AGENTS):  # "amber" in every fourth agent, ties on timestamps between them
            items = [("user", "amber pad" if i % 4 == 0 else "pad", BASE_TS + (i // 8) * 1000 + j) for j in range(3)]
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"{agent}m", items)))
        await engine.append(AppendParams(sessionKey="agent:b01:imported", events=timed("i", [("user", "amber", BASE_TS)])), index=False)
        stores = [await engine.store(a) for a in AGENTS]
        for match, k in [(Match(("amber",)), 4), (Match(("amber",)), 7), (Match(("am",), prefix=True), 2),
                         (Match(("amber",)), 50), (Match(("nowhere",)), 3)]:
            args = {"k": k, "order": "recent", "exclude": [], "role": None, "since": None, "until": None,
                    "deadline": math.inf}
            full = await engine.backend.search_top_many(stores, match, **args)
            sparse = await engine.backend.search_top_many(stores, match, **args, sparse=True)
            assert full is not None and sparse is not None
            for store, every, top in zip(stores, full, sparse, strict=True):
                assert every is not None
                if top is None:  # left unread: it holds none of the newest k
                    assert every.hits == [], (match, k, store.agent_id)
                else:
                    assert top == every, (match, k, store.agent_id)
            read = [top for top in sparse if top is not None]
            assert sum(len(top.hits) for top in read) == min(k, sum(len(top.hits) for top in full if top))
            assert len(read) < len(AGENTS)  # b01 among them: it holds no indexed "amber"
            assert sparse[1] is None and full[1] is not None and full[1].dirty  # its dirty window: in Newest


async def test_tied_scores_across_agents_are_cut_by_timestamp_then_message_id(pg):
    async with engine_at(pg) as engine:
        for i, agent in enumerate(AGENTS):  # the same corpus in every agent: the same scores
            items = [("user", "quartz " + "filler " * j, BASE_TS + (i % 4) * 1000 + j) for j in range(3)]
            items += [("assistant", "other words here", BASE_TS + 10_000 + j) for j in range(6)]
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"m{99 - i}x", items)))
        merged = []
        for agent in AGENTS:
            own = await engine.search(SearchParams(query="quartz", agentId=agent, limit=25))
            merged += own["results"]
        merged.sort(key=lambda h: (-h["score"], -h["timestamp"], h["messageId"]))
        assert len({h["score"] for h in merged}) == 3  # three scores, each shared by every agent
        for limit in (1, 3, 4, 5, 17, 25):
            every = await engine.search(SearchParams(query="quartz", limit=limit))
            assert every["results"] == merged[:limit], limit
            assert every.get("truncated", False) == (len(merged) > limit)


async def test_a_search_of_many_agents_reports_every_agents_windows_needing_reconciliation(pg):
    async with engine_at(pg) as engine:
        for agent in AGENTS[:5]:
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"{agent}m", [("user", "signal", BASE_TS)])))
        await engine.append(AppendParams(sessionKey="agent:b15:imported", events=timed("i", [("user", "signal fresh", BASE_TS)])), index=False)
        for _ in range(2):  # the second with the counts kept: b15, holding no row, has a light head
            answer = await engine.search(SearchParams(query="signal", limit=2))
            assert len(answer["results"]) == 2 and answer["truncated"] is True
            assert answer["indexing"] is True
        assert (await engine.pending())["b15"]


async def test_after_writes_to_some_agents_their_heads_and_counts_are_read_again_as_their_own_search_reads_them(pg):
    """`st` reads every agent's head and counts at once (search_many.stats_ctes): a head kept where it
    holds, else summed; a count kept where its index state holds, else counted. After writes to some
    agents (a message more, a window waiting for reconciliation) each agent's hits, head and counts
    are what its own search reads from nothing kept."""
    rnd = random.Random(31)
    async with engine_at(pg) as engine:
        ts = BASE_TS
        for agent in AGENTS[:8]:
            items = []
            for _ in range(rnd.randint(2, 9)):
                ts += 1000
                items.append(("user", " ".join(rnd.choices(WORDS + ["pad", "embers", "emblem", "emit", "empty"], k=rnd.randint(1, 9))),
                              ts))
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"{agent}m", items)))
        stores = [await engine.store(a) for a in AGENTS[:8]]
        matches = [Match(("amber",)), Match(("em",), prefix=True), Match(("birch", "emb"), prefix=True)]

        async def many(match):
            return await engine.backend.search_top_many(stores, match, k=100, order="relevance", exclude=[], role=None,
                                                        since=None, until=None, deadline=math.inf)
        for match in matches:
            await many(match)  # every head and count kept
        await engine.append(AppendParams(sessionKey="agent:b00:main", events=timed("b00x", [("user", "amber embers", ts + 1000)])))
        await engine.append(AppendParams(sessionKey="agent:b01:side", events=timed("b01x", [("user", "emblem amber", ts + 2000)])))
        await engine.append(AppendParams(sessionKey="agent:b02:imported", events=timed("b02x", [("user", "amber", ts + 3000)])), index=False)
        for match in matches:
            tops = await many(match)
            assert tops is not None
            for store, top in zip(stores, tops, strict=True):
                kept = store.dfs.kept_head
                counts = {text: df for text, (_, df) in store.dfs._counts.items()}
                store._dfs = DfCache()  # its own search, from nothing kept
                async with store.reader() as reader:
                    own = await store.search_top(reader, match, k=100, order="relevance", include=None, exclude=None,
                                                 role=None)
                assert sorted((h.row_id, h.score, h.message_id) for h in top.hits) == sorted(
                    (h.row_id, h.score, h.message_id) for h in own.hits), (match, store.agent_id)
                assert (top.meta_version, top.dirty) == (own.meta_version, own.dirty)
                assert kept is not None and store.dfs.kept_head is not None
                assert kept[4:] == store.dfs.kept_head[4:], store.agent_id  # rows, tokens, windows, gen
                for text, (_, df) in store.dfs._counts.items():
                    assert counts[text] == df, (match, store.agent_id, text)


@pytest.mark.parametrize("orphans", [3, 30])  # a few among the first 2k rows, or more than all of them
@pytest.mark.parametrize("order", ["relevance", "recent"])
async def test_rows_of_a_window_gone_are_left_out_before_the_cut_however_many_rank_first(pg, order, orphans):
    """search_many tests windows only on its first 2k rows (hot_cut) and walks the word again when
    fewer than k of them are hot: either way the answer is the top k of the rows whose window is
    there, as a merge of the agents' own answers less those rows gives it."""
    async with engine_at(pg) as engine:
        for i, agent in enumerate(AGENTS[:4]):
            items = [("user", f"quartz {'filler ' * (2 + j % 5)}", BASE_TS + i * 100_000 + j * 1000) for j in range(8)]
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"{agent}m", items)))
        # the best rows by either order, in a window then deleted under them (orphans awaiting the sweep)
        items = [("user", "quartz quartz", BASE_TS + 900_000 + j * 1000) for j in range(orphans)]
        await engine.append(AppendParams(sessionKey="agent:b01:gone", events=timed("gone", items)))
        stores = [await engine.store(a) for a in AGENTS[:4]]
        with psycopg.connect(pg.database_url, autocommit=True) as conn:
            (gone,) = conn.execute("SELECT wid FROM ss_windows WHERE session_key = 'agent:b01:gone'").fetchone()
            conn.execute("DELETE FROM ss_windows WHERE wid = %s", (gone,))
        merged = []
        for store in stores:
            async with store.reader() as reader:
                own = await store.search_top(reader, Match(("quartz",)), k=200, order=order, include=None,
                                             exclude=None, role=None)
            merged += [h for h in own.hits if wid_of(h.row_id) != gone]
        assert len(merged) == 32
        merged.sort(key=(lambda h: (-h.ts, h.message_id)) if order == "recent" else (lambda h: (h.score, -h.ts,
                                                                                                 h.message_id)))
        for k in (1, 5, 12):
            many = await engine.backend.search_top_many(stores, Match(("quartz",)), k=k, order=order, exclude=[],
                                                        role=None, since=None, until=None, deadline=math.inf)
            assert many is not None
            found = [(h.row_id, h.score) for top in many for h in top.hits]
            assert sorted(found) == sorted((h.row_id, h.score) for h in merged[:k]), (k, orphans)
