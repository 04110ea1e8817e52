"""`scope` on both stores: a scoped search over a roster of 10,000 sessions in one agent and over
1,000 agents (10 sessions each), and `sessions.list` with a scope paged to the end by 100s, the
filters run in the store (SQL, the code as it is) against the old path (the same rules in Python
over the in-memory catalog, kept here only to measure it beside).

    .venv/bin/python bench/bench_scope.py [--stores sqlite,postgres] [--reps 15]

Through the Python API (the engine), the variants interleaved rep by rep, the first rep not
counted; p50/p95 ms with the load average before and after. Saves bench/results/scope.json.
Goals (issue 38): a scoped search p95 under 50 ms whatever the filters select, a match in the
oldest session found; each list page of 100 under 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import commit, pct  # noqa: E402

from sessionsearch import Engine, Settings  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.keys import agent_of  # noqa: E402
from sessionsearch.protocol import ListParams, SearchParams  # noqa: E402
from sessionsearch.search import (
    plan,  # noqa: E402
    runner,  # noqa: E402
)
from sessionsearch.search.listing import encode_cursor  # noqa: E402
from sessionsearch.search.plan import Selected  # noqa: E402
from sessionsearch.search.scope import SessionScope  # noqa: E402
from sessionsearch.search.visibility import Viewer  # noqa: E402
from sessionsearch.transcript.events import parse_event  # noqa: E402

HERE = Path(__file__).resolve().parent
BASE_TS = 1_767_323_045_000
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DB_NAME = "ss_bench_scopesql"


def message(mid: str, text: str, ts: int) -> dict[str, Any]:
    return {"type": "message", "id": mid, "parentId": None, "timestamp": ts,
            "message": {"role": "user", "content": text, "timestamp": ts}}


async def build(engine: Engine, agents: int, per_agent: int) -> str:
    """`agents` agents of `per_agent` sessions: the oldest holds "needle"; every one "hay"; one is
    labelled "solo", one in a thousand "team alpha". Returns the oldest session's key."""
    oldest = ""
    n = 0
    for a in range(agents):
        agent = "main" if agents == 1 else f"a{a:04d}"
        store = await engine.store(agent, create=True)
        steps = []
        for i in range(per_agent):
            key = f"agent:{agent}:s{i:05d}"
            label = "solo" if n == 5 else "team alpha" if n % 1000 == 7 else f"session {n}"
            text = "needle in the oldest hay" if n == 0 else f"hay and words {n % 97}"
            if n == 0:
                oldest = key
            steps.append((key, {"label": label, "kind": "direct"}, [parse_event(message(f"m{n}", text, BASE_TS + n), "e")],
                          f"w{n}", 1))
            n += 1
        for start in range(0, len(steps), 1000):
            assert not [r for r in await store.import_many(steps[start:start + 1000]) if isinstance(r, Exception)]
        engine._meta_changed(agent)
    await engine.reconcile_pending()
    # the oldest session's activity strictly before every other's, as a long-idle roster's tail is
    for a in range(agents):
        agent = "main" if agents == 1 else f"a{a:04d}"
        store = await engine.store(agent)
        pg = type(store).__name__.startswith("Pg")
        for table in ("ss_sessions", "ss_windows") if pg else ("sessions", "windows"):
            await store.execute_write(f"UPDATE {table} SET updated_at = updated_at - 86400000 "
                                      f"WHERE session_key = '{oldest}'")
        engine._meta_changed(agent)
    return oldest


# -- the old path (in-memory catalog), for the measurement only ---------------------------------------

async def old_scoped_sessions(req: Any, viewer: Viewer, view: Any, backend: Any, stores: Any,
                              deadline: float) -> dict[str, Selected] | None:
    """What plan_scopes walked before: every session of the catalog through SessionScope.selects."""
    scope = req.scope
    if scope is None or not scope.narrows:
        return None
    return plan._from_catalog(req, viewer, view, [a for a in scope.agents(view.agent_ids)
                                                  if viewer.may_target_agent(a)])


async def old_list(engine: Engine, scope: SessionScope, cursor: tuple[int, str] | None, limit: int
                   ) -> tuple[list[str], str | None]:
    """sessions.list as it was: each agent's activity read whole, sorted and filtered in Python."""
    view = await engine.catalog_view(fresh_listing=True)
    agents = scope.agents(view.agent_ids)
    active: dict[str, int] = {}
    for agent in agents:
        store = await engine.store(agent)
        async with store.reader() as reader:
            _, times = await store.activity(reader)
        active.update(times)
    viewer = Viewer(engine.settings, None, view.catalog)
    spawned = scope.spawned(view.catalog.sessions)
    now_ms = int(time.time() * 1000)
    out: list[str] = []
    more = False
    after = None if cursor is None else (-cursor[0], cursor[1])
    sessions = [m for m in view.catalog.sessions.values() if m.session_key in active]
    for meta in sorted(sessions, key=lambda m: (-active[m.session_key], m.session_key)):
        key = meta.session_key
        if after is not None and (-active[key], key) <= after:
            continue
        if not viewer.can_see(key) or not scope.selects(meta, now_ms=now_ms, spawned=spawned,
                                                        in_palette=view.in_palette(key), updated_at=active[key]):
            continue
        if len(out) >= limit:
            more = True
            break
        out.append(key)
    return out, encode_cursor((active[out[-1]], out[-1])) if more and out else None


# -- measuring ------------------------------------------------------------------------------------------

def summary(ms: list[float]) -> dict[str, float]:
    return {"p50": round(pct(ms, 0.5), 2), "p95": round(pct(ms, 0.95), 2), "n": len(ms)}


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = await fn()
    return (time.perf_counter() - started) * 1000, value


SEARCHES = {  # name: (query, scope, the session that must be found or None)
    "one session (label solo)": ("hay", {"label": "solo"}, None),
    "a label's few (team alpha)": ("hay", {"label": "team alpha"}, None),
    "all, by a filter (kinds direct)": ("hay", {"kinds": ["direct"]}, None),
    "all, unfiltered scope (no roster read)": ("hay", {}, None),
    "all, activeMinutes": ("hay", {"activeMinutes": 10_000_000}, None),
    "title search (session 12)": ("hay", {"search": "session 12"}, None),
    "oldest's match, all by a filter": ("needle", {"kinds": ["direct"]}, "oldest"),
    "oldest's match, unfiltered scope": ("needle", {}, "oldest"),
}


async def measure(engine: Engine, oldest: str, reps: int, max_pages: int | None) -> dict[str, Any]:
    new_path = runner.scoped_sessions
    threshold = plan.ROSTER_SQL_AGENTS
    many = len(engine.agent_ids_on_disk()) > threshold or engine.backend.shared_database and len(
        (await engine.catalog_view()).agent_ids) > threshold
    # [sql]: the store's statements however many agents; [catalog]: as shipped past ROSTER_SQL_AGENTS
    # agents on SQLite (the catalog, empty agents left out where the stores' versions match it)
    variants = ("sql", "catalog", "memory") if many and not engine.backend.features.many_in_one_statement else (
        "sql", "memory")
    figures: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    for rep in range(reps + 1):
        for name, (query, scope, must) in SEARCHES.items():
            for variant in variants:
                runner.scoped_sessions = old_scoped_sessions if variant == "memory" else new_path  # type: ignore[assignment]
                plan.ROSTER_SQL_AGENTS = 1 << 30 if variant == "sql" else threshold
                try:
                    ms, found = await timed(lambda: engine.search(SearchParams(query=query, scope=scope, limit=10)))
                finally:
                    runner.scoped_sessions = new_path
                    plan.ROSTER_SQL_AGENTS = threshold
                if must is not None:
                    assert [h["sessionKey"] for h in found["results"]] == [oldest], (name, variant, found)
                if rep:
                    samples.setdefault(f"search: {name} [{variant}]", []).append(ms)
        # the list paged to its end, 100 a page
        for variant in ("sql", "memory"):
            scope = {"kinds": ["direct"]}
            pages: list[float] = []
            total = 0
            cursor: Any = None
            while True:
                if variant == "sql":
                    ms, page = await timed(lambda: engine.list_sessions(ListParams(scope=scope, cursor=cursor,
                                                                                   limit=100)))
                    keys, cursor = [s["sessionKey"] for s in page["sessions"]], page.get("nextCursor")
                else:
                    parsed = None if cursor is None else (int(cursor.split("~", 1)[0]), cursor.split("~", 1)[1])
                    ms, (keys, cursor) = await timed(lambda: old_list(engine, SessionScope(kinds=frozenset(
                        ["direct"])), parsed, 100))
                pages.append(ms)
                total += len(keys)
                if cursor is None or len(pages) == max_pages:
                    break
            assert total == figures.setdefault("listed", total), (variant, total)
            if rep:
                samples.setdefault(f"list page of 100 [{variant}]", []).extend(pages)
    figures["figures"] = {name: summary(ms) for name, ms in samples.items()}
    return figures


async def run_store(kind: str, reps: int, agents: int, per_agent: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-scope-") as tmp:
        url = None
        if kind == "postgres":
            with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
                admin.execute(f'CREATE DATABASE "{DB_NAME}"')
            url = f"postgresql://postgres@127.0.0.1:5432/{DB_NAME}"
        try:
            async with Engine(tmp, settings=Settings(data_dir=tmp, database_url=url)) as engine:
                started = time.monotonic()
                oldest = await build(engine, agents, per_agent)
                built_s = time.monotonic() - started
                load = [round(os.getloadavg()[0], 2)]
                # the old list read every agent's activity a page: at 1,000 agents the first pages tell
                out = await measure(engine, oldest, reps, None if agents == 1 else 5)
                load.append(round(os.getloadavg()[0], 2))
                out.update({"build_s": round(built_s, 1), "load_avg_1m": load})
                assert agent_of(oldest) in engine.agent_ids_on_disk() or url is not None
                return out
        finally:
            if url is not None:
                with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--rosters", default="one-agent,many-agents")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the saved results of the rosters not run")
    args = parser.parse_args()
    sslogging.configure("WARNING")
    rosters = {"one-agent": (1, 10_000), "many-agents": (1_000, 10)}
    path = HERE / "results" / "scope.json"
    results: dict[str, Any] = json.loads(path.read_text())["results"] if args.keep and path.exists() else {}
    for roster in args.rosters.split(","):
        agents, per_agent = rosters[roster]
        for kind in args.stores.split(","):
            print(f"{roster} on {kind}: building {agents} x {per_agent} ...", flush=True)
            found = await run_store(kind, args.reps, agents, per_agent)
            results[f"{roster} / {kind}"] = found
            print(json.dumps(found, indent=1), flush=True)
            path.write_text(json.dumps({"results": results}, indent=1) + "\n")  # what is measured so far
    out = {"commit": commit(), "machine": platform.platform(), "cpus": os.cpu_count(), "reps": args.reps,
           "what": "p50/p95 ms through the engine; [sql]: the filters in the store, [memory]: the old in-memory "
                   "catalog path, interleaved", "results": results}
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"saved {path}")


if __name__ == "__main__":
    asyncio.run(main())
