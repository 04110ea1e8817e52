"""Visibility (SPEC §6) as a property: random worlds and settings against an oracle of the SPEC.

Hypothesis builds worlds of several agents whose sessions spawn one another (spawnedBy and
parentSessionKey, across agents too), with kinds, incognito and archived sessions, each holding one
message with a shared word and a word of its own, and draws the §6 settings. Every requester of the
world (sandboxed or not) and the operator then search (unscoped, by agentId, by sessionKeys, under a
small limit), list and read history; each answer is compared with the oracle below,
written from the SPEC text alone (it does not use sessionsearch.search.visibility).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from sessionsearch import Engine, Forbidden, Settings
from sessionsearch.protocol import AppendParams, HistoryParams, ListParams, SearchParams, SessionRef, UpsertParams

from ..helpers import BASE_TS, msg

SHARED = "zebra"
# Agent ids that differ in case and share prefixes, so that exact allow entries (case-sensitive)
# and wildcards (case-insensitive) give different answers.
AGENTS = ["main", "ops-2", "Ops", "dev_1"]
ALLOW_ENTRIES = ["main", "MAIN", "ops-2", "OPS-2", "Ops", "ops", "dev_1", "*", "ops*", "OP*", "*_1", "m*n",
                 "o?s-2", "*-2"]
KINDS = ["direct", "group", "subagent", "cron", "system"]


# -- the oracle ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Session:
    key: str
    agent: str
    token: str
    ts: int
    spawned_by: str | None
    parent: str | None
    kind: str
    incognito: bool
    archived: bool


@dataclass(frozen=True)
class Config:
    visibility: str
    a2a_enabled: bool
    allow: tuple[str, ...]
    sandbox: str

    def settings(self, data_dir: str) -> Settings:
        return Settings(data_dir=data_dir, visibility=self.visibility, agent_to_agent_enabled=self.a2a_enabled,
                        agent_to_agent_allow=self.allow, sandbox_session_tools_visibility=self.sandbox)


@dataclass(frozen=True)
class Requester:
    key: str
    sandboxed: bool

    def wire(self) -> dict:
        return {"sessionKey": self.key, "sandboxed": self.sandboxed}


def allow_entry_matches(entry: str, agent: str) -> bool:
    """SPEC §6: `*` wildcards compare case-insensitively; an entry without one is an exact, case-sensitive id.
    Only `*` is a wildcard: `?` and `.` are literal characters."""
    if "*" not in entry:
        return entry == agent
    pattern = "".join(".*" if ch == "*" else re.escape(ch) for ch in entry)
    return re.fullmatch(pattern, agent, re.IGNORECASE | re.DOTALL) is not None


def agent_allowed(agent: str, allow: tuple[str, ...]) -> bool:
    return not allow or any(allow_entry_matches(entry, agent) for entry in allow)


def descendants(world: dict[str, Session], root: str) -> set[str]:
    """Sessions `root` spawned or parents, transitively ("the sessions it spawned or parents"), read as
    the sessions below it through either link. The links are followed through incognito and archived
    sessions too: hiding a session hides it, not the sessions it spawned."""
    out: set[str] = set()
    frontier = {root}
    while frontier:
        below = {s.key for s in world.values()
                 if s.key not in out and (s.spawned_by in frontier or s.parent in frontier)}
        out |= below
        frontier = below
    out.discard(root)
    return out


def cross_agent_allowed(cfg: Config, requester_agent: str, target_agent: str) -> bool:
    """SPEC §6: cross-agent access needs visibility `all`, agentToAgent enabled and both ids allowed."""
    return (cfg.visibility == "all" and cfg.a2a_enabled and agent_allowed(requester_agent, cfg.allow)
            and agent_allowed(target_agent, cfg.allow))


def sandbox_confined(cfg: Config, requester: Requester | None) -> bool:
    return requester is not None and requester.sandboxed and cfg.sandbox == "spawned"


def visible(world: dict[str, Session], cfg: Config, requester: Requester | None) -> set[str]:
    """The sessions a requester may see; none is an operator, who sees every non-incognito session.

    Readings of the SPEC where it leaves room:
    - `tree`: its own session, the sessions below it (`descendants`), and, for an agent's main session
      `agent:<id>:main`, every session of that agent as well.
    - "sessions the requester spawned stay reachable under tree or all even cross-agent": the same
      transitive set as `tree`'s.
    - a sandboxed requester under `spawned` sees the intersection of what its visibility gives and
      itself plus the sessions below it: the sandbox narrows, it never widens (`agent` keeps a
      sandboxed requester off other agents' sessions, even ones it spawned).
    - incognito sessions are never seen, not even by their own requester.
    """
    shown = {k for k, s in world.items() if not s.incognito}
    if requester is None:
        return shown
    me = world[requester.key]
    below = descendants(world, me.key)
    own_agent = {k for k, s in world.items() if s.agent == me.agent}
    if cfg.visibility == "self":
        seen = {me.key}
    elif cfg.visibility == "tree":
        seen = {me.key} | below | (own_agent if me.key == f"agent:{me.agent}:main" else set())
    elif cfg.visibility == "agent":
        seen = own_agent
    else:
        seen = own_agent | below | {k for k, s in world.items() if cross_agent_allowed(cfg, me.agent, s.agent)}
    if sandbox_confined(cfg, requester):
        seen &= {me.key} | below
    return seen & shown


def agent_scope_denied(world: dict[str, Session], cfg: Config, requester: Requester | None, agent: str,
                       seen: set[str]) -> bool:
    """Whether `agentId` naming `agent` is a denial (forbidden) rather than a scope to search.

    The SPEC says explicit targeting of what the caller may not see is forbidden and scoping by
    agentId searches "the sessions of agentId"; read here: an agent is denied when the caller may
    see none of its sessions and has no access to the agent as such (neither its own agent, nor
    one that cross-agent rules open to it). The operator names any agent."""
    if requester is None:
        return False
    if any(world[k].agent == agent for k in seen):
        return False
    me = world[requester.key]
    if agent == me.agent:
        return False
    return sandbox_confined(cfg, requester) or not cross_agent_allowed(cfg, me.agent, agent)


# -- worlds -------------------------------------------------------------------------------------

@st.composite
def worlds(draw) -> dict[str, Session]:
    agents = draw(st.lists(st.sampled_from(AGENTS), min_size=2, max_size=3, unique=True))
    n = draw(st.integers(3, 8))
    keys: list[str] = []
    world: dict[str, Session] = {}
    for i in range(n):
        agent = agents[i] if i < len(agents) else draw(st.sampled_from(agents))  # every agent has a session
        main = f"agent:{agent}:main"
        key = main if main not in keys and draw(st.booleans()) else f"agent:{agent}:s{i}"
        earlier = st.one_of(st.none(), st.sampled_from(keys)) if keys else st.none()
        world[key] = Session(
            key=key, agent=agent, token=f"tok{i}q", ts=BASE_TS + i * 1000,
            spawned_by=draw(earlier), parent=draw(earlier), kind=draw(st.sampled_from(KINDS)),
            incognito=draw(st.integers(0, 4)) == 0, archived=draw(st.integers(0, 4)) == 0)
        keys.append(key)
    return world


@st.composite
def allow_entries(draw, agent: str) -> list[str]:
    """Entries that name `agent`, or nearly do: exactly or in another case, by a `*` pattern in
    either case, or with a `?` (not a wildcard), so that the case rules decide."""
    case = draw(st.sampled_from([str, str.upper, str.lower, str.swapcase]))
    form = draw(st.sampled_from(["none", "exact", "prefix", "suffix", "qmark"]))
    if form == "none":
        return []
    if form == "exact":
        return [case(agent)]
    if form == "prefix":
        return [case(agent[:2]) + "*"]
    if form == "suffix":
        return ["*" + case(agent[-2:])]
    return [agent[0] + "?" + agent[2:]]


@st.composite
def configs(draw, agents: list[str]) -> Config:
    # `all` and an enabled agent-to-agent setting are where the allow list decides: drawn more often
    visibility = draw(st.sampled_from(["all", "all", "agent", "tree", "self"]))
    allow: list[str] = []
    if draw(st.integers(0, 3)):
        for agent in agents:
            allow += draw(allow_entries(agent))
        allow += draw(st.lists(st.sampled_from(ALLOW_ENTRIES), max_size=1))
    return Config(visibility, draw(st.sampled_from([True, True, False])), tuple(allow),
                  draw(st.sampled_from(["spawned", "all"])))


async def build(engine: Engine, world: dict[str, Session]) -> None:
    for s in world.values():
        # live appends: indexed in the same transaction, so nothing awaits reconciliation
        await engine.append(AppendParams(sessionKey=s.key, events=[msg(f"{s.token}-m", "user", f"{SHARED} {s.token} words", None, ts=s.ts)]))
        meta = {"kind": s.kind, "incognito": s.incognito}
        if s.spawned_by is not None:
            meta["spawnedBy"] = s.spawned_by
        if s.parent is not None:
            meta["parentSessionKey"] = s.parent
        await engine.upsert_session(UpsertParams.of({"sessionKey": s.key, **meta}))
    for s in world.values():
        if s.archived:
            await engine.archive(SessionRef(sessionKey=s.key))


def describe(world: dict[str, Session]) -> str:
    flags = {"spawned_by": "spawnedBy", "parent": "parent", "incognito": "incognito", "archived": "archived"}
    return "; ".join(k + "".join(f" {label}={getattr(s, f)}" for f, label in flags.items() if getattr(s, f))
                     for k, s in world.items())


# -- the checks ---------------------------------------------------------------------------------

class Checker:
    def __init__(self, engine: Engine, world: dict[str, Session], cfg: Config, stats: Counter) -> None:
        self.engine, self.world, self.cfg, self.stats = engine, world, cfg, stats

    def expect(self, ok: bool, what: str, context: dict) -> None:
        self.stats["checks"] += 1
        assert ok, f"{what}: cfg={self.cfg} {context}\nworld: {describe(self.world)}"

    async def denied(self, call) -> tuple[bool, dict | None]:
        try:
            return False, await call
        except Forbidden:
            return True, None

    def search_expected(self, keys: set[str]) -> tuple[set[str], int]:
        """Hits (message ids) of the shared word over these visible sessions, and the archived ones left out."""
        return ({f"{self.world[k].token}-m" for k in keys if not self.world[k].archived},
                sum(self.world[k].archived for k in keys))

    async def search(self, requester: Requester | None, seen: set[str], **scope) -> None:
        body = {"query": SHARED, "limit": 25, **scope}
        if requester is not None:
            body["requester"] = requester.wire()
        context = {"requester": requester, "scope": scope, "visible": sorted(seen)}
        if "sessionKeys" in scope:
            targets = set(scope["sessionKeys"])
            deny = not targets <= seen
            keys = targets
        elif "agentId" in scope:
            keys = {k for k in seen if self.world[k].agent == scope["agentId"]}
            deny = agent_scope_denied(self.world, self.cfg, requester, scope["agentId"], seen)
        else:
            keys, deny = seen, False
        was_denied, result = await self.denied(self.engine.search(SearchParams.of(body)))
        self.expect(was_denied == deny, "denial" if deny else "answer", {**context, "result": result})
        if deny:
            self.stats["denials"] += 1
            return
        hits, archived = self.search_expected(keys)
        self.stats["hits"] += len(hits)
        found = {h["messageId"] for h in result["results"]}
        self.expect(found <= hits, "leak", {**context, "extra": sorted(found - hits)})
        self.expect(found == hits, "missing", {**context, "missing": sorted(hits - found)})
        self.expect(result.get("archivedTranscriptsExcluded", 0) == archived, "archived count",
                    {**context, "result": result})
        self.expect("indexing" not in result and "truncated" not in result, "flags", {**context, "result": result})

    async def limited(self, requester: Requester | None, seen: set[str], limit: int) -> None:
        """Visibility applies before the limit: the newest visible hits, however many newer are hidden."""
        body = {"query": SHARED, "limit": limit, "order": "recent"}
        if requester is not None:
            body["requester"] = requester.wire()
        result = await self.engine.search(SearchParams.of(body))
        ranked = sorted((s for k, s in self.world.items() if k in seen and not s.archived), key=lambda s: -s.ts)
        expected = [f"{s.token}-m" for s in ranked[:limit]]
        self.expect([h["messageId"] for h in result["results"]] == expected, "limit before visibility",
                    {"requester": requester, "limit": limit, "result": result})

    async def listing(self, requester: Requester | None, seen: set[str], agent: str | None) -> None:
        body: dict = {} if requester is None else {"requester": requester.wire()}
        if agent is not None:
            body["agentId"] = agent
        expected = {k for k in seen if agent is None or self.world[k].agent == agent}
        was_denied, result = await self.denied(self.engine.list_sessions(ListParams.of(body)))
        context = {"requester": requester, "agentId": agent, "visible": sorted(seen)}
        if was_denied:
            # the SPEC gives sessions.list no denial of its own; one is acceptable only where the
            # same scope would be a search's denial, and never hides something visible
            self.expect(agent is not None and not expected
                        and agent_scope_denied(self.world, self.cfg, requester, agent, seen), "list denial", context)
            return
        listed = {s["sessionKey"]: s for s in result["sessions"]}
        self.expect(set(listed) == expected, "list", {**context, "listed": sorted(listed)})
        self.expect(all(s["archived"] == self.world[k].archived for k, s in listed.items()), "list archived", context)

    async def history(self, requester: Requester | None, seen: set[str], key: str) -> None:
        body = {"sessionKey": key}
        if requester is not None:
            body["requester"] = requester.wire()
        was_denied, result = await self.denied(self.engine.history(HistoryParams.of(body)))
        context = {"requester": requester, "target": key, "visible": sorted(seen)}
        self.expect(was_denied == (key not in seen), "history denial" if key not in seen else "history answer",
                    {**context, "result": result})
        self.stats["denials"] += was_denied
        if not was_denied:
            self.expect([m["messageId"] for m in result["messages"]] == [f"{self.world[key].token}-m"],
                        "history messages", {**context, "result": result})


async def check_world(world: dict[str, Session], cfg: Config, picks: list[list[str]], limit: int,
                      stats: Counter) -> None:
    data_dir = tempfile.mkdtemp(prefix="ss-vis-")
    try:
        async with Engine(data_dir, settings=cfg.settings(data_dir)) as engine:
            await build(engine, world)
            checker = Checker(engine, world, cfg, stats)
            agents = sorted({s.agent for s in world.values()})
            requesters = [None] + [Requester(k, sandboxed) for k in world for sandboxed in (False, True)]
            for requester in requesters:
                seen = visible(world, cfg, requester)
                await checker.search(requester, seen)
                for agent in agents:
                    await checker.search(requester, seen, agentId=agent)
                    await checker.listing(requester, seen, agent)
                for keys in picks:
                    await checker.search(requester, seen, sessionKeys=keys)
                await checker.limited(requester, seen, limit)
                await checker.listing(requester, seen, None)
            # history last: reading an archived session restores it, which changes what search sees
            for requester in requesters:
                seen = visible(world, cfg, requester)
                for key in world:
                    await checker.history(requester, seen, key)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    stats["worlds"] += 1


@st.composite
def examples(draw):
    world = draw(worlds())
    keys = sorted(world)
    picks = [[k] for k in keys] + draw(st.lists(st.lists(st.sampled_from(keys), min_size=2, max_size=4, unique=True),
                                                min_size=1, max_size=3))
    return world, draw(configs(sorted({s.agent for s in world.values()}))), picks, draw(st.integers(1, 3))


# the worlds are checked in shards that run side by side under `pytest -n`
SHARDS = 4


@pytest.mark.parametrize("shard", range(SHARDS))
def test_no_requester_ever_sees_outside_its_visible_sessions_and_misses_nothing_inside(shard):
    stats: Counter = Counter()

    # CI runs a fixed sequence of examples per shard (a failure there reproduces); locally each run
    # explores anew, and SESSIONSEARCH_VISIBILITY_WORLDS=2000 explores further (over all shards).
    @settings(max_examples=int(os.environ.get("SESSIONSEARCH_VISIBILITY_WORLDS", "400")) // SHARDS, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(examples())
    def check(example):
        world, cfg, picks, limit = example
        asyncio.run(check_world(world, cfg, picks, limit, stats))

    (seed(shard)(check) if os.environ.get("CI") else check)()
    assert stats["worlds"] > 0 and stats["checks"] > stats["worlds"]
    print(f"visibility: {stats['worlds']} worlds, {stats['checks']} checks, 0 leaks "
          f"({stats['denials']} denials and {stats['hits']} expected hits among them)")


@pytest.mark.parametrize(("entry", "agent", "allowed"), [
    ("ops-2", "ops-2", True), ("OPS-2", "ops-2", False), ("OP*", "ops-2", True), ("OP*", "Ops", True),
    ("o?s-2", "ops-2", False), ("*", "dev_1", True), ("m*n", "main", True), ("M*N", "main", True),
    ("*-2", "Ops", False),
])
def test_the_oracle_reads_allow_entries_as_the_spec_writes_them(entry, agent, allowed):
    assert allow_entry_matches(entry, agent) is allowed
