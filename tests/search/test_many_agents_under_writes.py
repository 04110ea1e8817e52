"""A search of every agent while sessions are created and changed beside it (issue 40): an agent
read at a newer meta version than the search scoped it at keeps its answer when the metadata as it
is now scopes it alike (search/visits.py Versions, runner.py), and is scoped again when not. Another
engine on the same store writes, as another process would, once the searching engine has scoped."""

from __future__ import annotations

import pytest

from sessionsearch.protocol import AppendParams, SearchParams, SessionRef, UpsertParams

from ..helpers import BASE_TS, engine_at, timed

AGENTS = [f"u{i:02d}" for i in range(12)]


async def _corpus(engine) -> None:
    for i, agent in enumerate(AGENTS):
        items = [("user", f"harbor lantern {'tide ' * (j % 3)}", BASE_TS + i * 10_000 + j * 1000) for j in range(2)]
        await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=timed(f"{agent}m", items)))


def _after_scoping(engine, write):
    """`write()` once, right after the search's first catalog view: the search runs on a view
    that no longer holds the metadata. Returns the list of views read, one per scoping."""
    views: list[object] = []
    view_with = engine._catalog.view_with

    async def hooked(*args, **kwargs):
        view = await view_with(*args, **kwargs)
        views.append(view)
        if len(views) == 1:
            await write()
        return view

    engine._catalog.view_with = hooked
    return views


@pytest.mark.parametrize("order", ["relevance", "recent"])
async def test_a_session_created_while_every_agent_is_searched_is_answered_without_scoping_again(backend, order):
    async with engine_at(backend) as engine, engine_at(backend) as other:
        await _corpus(engine)
        await engine.search(SearchParams(query="harbor", limit=5))  # the catalog read

        async def new_session() -> None:  # the newest and best hit, in a session the view lacks
            await other.append(AppendParams(sessionKey=f"agent:{AGENTS[3]}:fresh", events=timed(
                "fresh", [("user", "harbor harbor harbor", BASE_TS + 900_000)])))

        views = _after_scoping(engine, new_session)
        answer = await engine.search(SearchParams(query="harbor", order=order, limit=5))
        engine._catalog.view_with = type(engine._catalog).view_with.__get__(engine._catalog)
        again = await engine.search(SearchParams(query="harbor", order=order, limit=5))
        assert answer["results"] == again["results"]
        assert answer["results"][0]["messageId"] == "fresh1"
        assert answer["results"][0]["sessionKey"] == f"agent:{AGENTS[3]}:fresh"
        assert len(views) == 1  # scoped once: the new session left every agent's scope alike


@pytest.mark.parametrize("order", ["relevance", "recent"])
async def test_a_session_made_incognito_while_every_agent_is_searched_is_left_out(backend, order):
    async with engine_at(backend) as engine, engine_at(backend) as other:
        await _corpus(engine)
        hidden = f"agent:{AGENTS[-1]}:main"  # the newest agent: its hits lead by `recent`
        before = await engine.search(SearchParams(query="harbor", order=order, limit=25))
        assert hidden in {h["sessionKey"] for h in before["results"]}

        async def incognito() -> None:
            await other.upsert_session(UpsertParams.of({"sessionKey": hidden, "incognito": True}))

        views = _after_scoping(engine, incognito)
        answer = await engine.search(SearchParams(query="harbor", order=order, limit=25))
        assert hidden not in {h["sessionKey"] for h in answer["results"]}
        assert len(answer["results"]) == len(before["results"]) - 2
        assert len(views) >= 2  # scoped again: the agent's scope changed


def _agent(view):
    return (sorted(view.keys), view.windows, view.hot_wids, view.incognito_hot, view.visible_hot, view.visible_cold)


async def test_the_catalog_read_again_by_its_changes_equals_it_read_whole(backend):
    async with engine_at(backend) as engine:
        await _corpus(engine)
        await engine.search(SearchParams(query="harbor", limit=5))  # the catalog read whole
        # a session created, one deleted, one made incognito: each agent's rows read again alone
        await engine.append(AppendParams(sessionKey=f"agent:{AGENTS[0]}:side", events=timed(
            "side", [("user", "harbor", BASE_TS + 500_000)])))
        await engine.delete(SessionRef.of({"sessionKey": f"agent:{AGENTS[1]}:main"}))
        await engine.upsert_session(UpsertParams.of({"sessionKey": f"agent:{AGENTS[2]}:main", "incognito": True}))
        changed = await engine.catalog_view()
        async with engine_at(backend) as fresh:  # another process: every agent's rows read whole
            whole = await fresh.catalog_view()
        assert {a: _agent(v) for a, v in changed.agents.items()} == {a: _agent(v) for a, v in whole.agents.items()}
        assert changed.catalog.sessions == whole.catalog.sessions
        assert changed.catalog.children == whole.catalog.children
        assert f"agent:{AGENTS[1]}:main" not in changed.catalog.sessions
        assert f"agent:{AGENTS[0]}:side" in changed.catalog.sessions
        assert changed.agents[AGENTS[2]].incognito_hot and not changed.agents[AGENTS[2]].visible_hot
        answer = await engine.search(SearchParams(query="harbor", limit=25))
        keys = {h["sessionKey"] for h in answer["results"]}
        assert f"agent:{AGENTS[0]}:side" in keys
        assert not keys & {f"agent:{AGENTS[1]}:main", f"agent:{AGENTS[2]}:main"}
