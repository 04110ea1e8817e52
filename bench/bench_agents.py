"""Many agents (issue 25): an operator search over every agent (no agentId) on N agents x M messages,
on SQLite and on PostgreSQL: rare and common words, exact and prefix, relevance and recent.

    .venv/bin/python bench/bench_agents.py --label after [--agents 1000 --messages 50 --reps 10]
    .venv/bin/python bench/bench_agents.py --label after --shapes 10x50,100x50,1000x50   # the growth curve
    .venv/bin/python bench/bench_agents.py --label before --concurrency 0   # every agent at once
    .venv/bin/python bench/bench_agents.py --label writes --shapes 1000x50 --fold --writes 10   # under writes

Each message holds "alpha" (the common word: in every message of every agent) among filler words;
one message in each 20th agent holds "zephyr" (the rare word). Prefix classes search "alp" and "zep".
Per class: p50/p95 of the searches (the first round not counted), and the errors met (a 503 when
the PostgreSQL pool is waited out); per store the process's open files (/proc/self/fd) and RSS,
highest seen while searching. `--concurrency 0` sends every agent's statement at once, what the
code did before search_agents_concurrency. `--fold` measures each store as built (`built_classes`),
then again once a worker's check has folded every agent's score bounds (`classes`, `fold_s`); each
class's `first_ms` is its first search in the process (after one search of a filler word opened
the stores' connections). The garbage collector is set as `serve` sets it (gcpause.py) unless
`--gc default`. `--shapes` measures several shapes in one
command, one after another (each shape's stores in turn). The built corpus is kept (bench/work/, a database
named for N x M) so a second label measures the same data. Figures go under the label and the
shape "NxM" in bench/results/agents.json, with the commit measured and the load average before and
after each store's searches (the machine is shared: a ratio means something only between runs at a
like load).

The state users are in (issue 40), the headline: `--written` builds each shape afresh (a scratch
data dir, a scratch PostgreSQL database) and measures it as a gateway leaves it: right after the
appends, no fold (`written_classes`), then while `--writes` messages a second stream to random
agents with the worker's check folding beside them (`writes_classes`), then once every agent is
folded (`classes`). Each class is measured over every agent and, beside it, in one agent's search
(`... one`, agent ag0000). Side by side in one run: `--variants before,after --base REV` runs each
shape and store once per variant, alternating, each in a child process of its own (`before`
imports the `sessionsearch/` tree of REV, exported to bench/work/), under the labels
`written-before` and `written-after`:

    .venv/bin/python bench/bench_agents.py --written --variants before,after --base main \
        --shapes 100x50,1000x50 --writes 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from sessionsearch.protocol import AppendParams, SearchParams

# `--tree DIR`: import sessionsearch from DIR (the `before` variant: the base commit's tree; the
# editable install's finder, ahead of sys.path, taken out; a child the worker's check spawns runs
# this module first with the same argv, so it imports from DIR too)
CODE = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv else str(Path(__file__).resolve().parent.parent)
if "--tree" in sys.argv:
    sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path.insert(0, CODE)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg  # noqa: E402
from stats import commit, pct  # noqa: E402

from sessionsearch import Engine, Settings, gcpause  # noqa: E402
from sessionsearch import logging as sslogging  # noqa: E402
from sessionsearch.errors import SearchTimeout  # noqa: E402
from sessionsearch.worker.optimize import PeriodicOptimize  # noqa: E402

HERE = Path(__file__).resolve().parent
FILLER = "the of report deploy queue window budget meeting server review draft ticket notes plan".split()
CLASSES = [(word, match, order) for word, match in [("zephyr", "exact"), ("alpha", "exact"), ("zep", "prefix"),
                                                     ("alp", "prefix")]
           for order in ("relevance", "recent")]
ONE_AGENT = "ag0000"  # holds the rare word (every 20th agent does)


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        agents, _, messages = item.strip().lower().partition("x")
        shapes.append((int(agents), int(messages)))
    return shapes


def url_of(base: str, name: str) -> str:
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


async def build(settings: Settings, agents: int, messages: int) -> None:
    """`agents` agents of one session of `messages` messages each, appended agent by agent."""
    rng = random.Random(25)
    async with Engine(settings=settings) as engine:
        have = set(engine.agent_ids_on_disk())
        for a in range(agents):
            agent = f"ag{a:04d}"
            if agent in have:
                continue
            events, parent = [], None
            rare_at = rng.randrange(messages) if a % 20 == 0 else -1
            for i in range(messages):
                words = rng.choices(FILLER, k=rng.randint(3, 20)) + ["alpha"]
                if i == rare_at:
                    words.append("zephyr")
                rng.shuffle(words)
                mid = f"{agent}-{i}"
                events.append({"type": "message", "id": mid, "parentId": parent, "message": {
                    "role": "user" if i % 2 else "assistant", "content": " ".join(words),
                    "timestamp": 1_700_000_000_000 + a * 1000 + i}})
                parent = mid
            await engine.append(AppendParams(sessionKey=f"agent:{agent}:main", events=events, sessionId=f"w{a}"))


async def fold_due(settings: Settings) -> int:
    """What a worker's check does first for the agents it finds due: their score bounds folded
    (store/sqlite/bounds.py, store/postgres/bounds.py), before any postings build. The agents
    folded."""
    async with Engine(settings=settings) as engine:
        due = await engine.postings_due()
        folded = [await (await engine.store(agent)).fold_bounds() for agent in due]
    return sum(1 for done in folded if done)


class Writes:
    """A gateway streaming into the agents while they are searched, as `serve` runs beside it:
    `rate` messages a second, each appended to a random agent (they stay in the kept corpus, each
    run's in a session of its own per agent, one chain: linear appends, as a gateway's, with no
    window left for reconciliation, which would hold the agent's fold back), and the worker's check
    (PeriodicOptimize: every postings_check_every_s the stale agents' bounds folded, in a child
    at idle priority) asking this process's engine what is due."""

    def __init__(self, engine: Engine, agents: int, rate: float) -> None:
        self.engine, self.agents, self.rate = engine, agents, rate
        self.parents: dict[int, str | None] = dict.fromkeys(range(agents))
        self.appended = 0
        self.rng = random.Random(2025)
        self.run = f"w{int(time.time())}"  # this run's sessions and message ids: a later run's are new ones
        self.optimizer: PeriodicOptimize | None = None
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> Writes:
        loop = asyncio.get_running_loop()
        self.optimizer = PeriodicOptimize(self.engine.settings, due=lambda: asyncio.run_coroutine_threadsafe(
            self.engine.postings_due(), loop).result(timeout=120))
        self.optimizer.start()
        self.task = asyncio.create_task(self._append())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None and self.optimizer is not None
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        await asyncio.to_thread(self.optimizer.stop)

    async def _append(self) -> None:
        started = time.perf_counter()
        while True:
            a = self.rng.randrange(self.agents)
            agent, mid = f"ag{a:04d}", f"ag{a:04d}-{self.run}-{self.appended}"
            words = self.rng.choices(FILLER, k=self.rng.randint(3, 20)) + ["alpha"]
            await self.engine.append(AppendParams(sessionKey=f"agent:{agent}:{self.run}", events=[{
                "type": "message", "id": mid, "parentId": self.parents[a], "message": {
                    "role": "user", "content": " ".join(words), "timestamp": int(time.time() * 1000)}}], sessionId=f"{self.run}-{a}"))
            self.parents[a] = mid
            self.appended += 1
            await asyncio.sleep(max(0.0, started + self.appended / self.rate - time.perf_counter()))

    def figures(self) -> dict:
        assert self.optimizer is not None
        return {"rate_per_s": self.rate, "appended": self.appended,
                "checks_folded": [len(b["agents"]) for b in self.optimizer.builds]}


async def measure(settings: Settings, reps: int, gc_mode: str = "serve",
                  writes: tuple[int, int, float, float] | None = None, settle_s: float = 0.0,
                  one_agent: bool = False) -> dict:
    """The classes' figures; `writes` (agents, messages, rate, warm-up s): searched while the
    agents are written (Writes), from `warm-up` seconds after the writes began; `settle_s`: the
    classes searched that long, untimed, before the timed rounds (a server searched all along)."""
    out: dict = {"classes": {}}
    before_open = open_files()
    async with Engine(settings=settings) as engine, contextlib.AsyncExitStack() as during:
        if writes is not None:
            agents, _, rate, warm_s = writes
            streaming = await during.enter_async_context(Writes(engine, agents, rate))
            await asyncio.sleep(warm_s)
        out["agents"] = len(engine.agent_ids_on_disk())
        out["open_files_idle"] = open_files() - before_open
        peak_fd, peak_rss = open_files(), rss_mib()
        searched = [(f"{w} {m} {o}", {"query": w, "match": m, "order": o}) for w, m, o in CLASSES]
        if one_agent:  # one agent's search beside the search of them all
            searched += [(f"{w} {m} {o} one", {"query": w, "match": m, "order": o, "agentId": ONE_AGENT})
                         for w, m, o in CLASSES]
        times: dict[str, list[float]] = {name: [] for name, _ in searched}
        errors: dict[str, dict[str, int]] = {name: {} for name in times}
        first: dict[str, float] = {}
        started = time.perf_counter()
        for _ in range(3):  # the stores' connections opened (and migrated, after an upgrade): no class's cost
            try:
                await engine.search(SearchParams(query="report", limit=10))
                break
            except SearchTimeout:
                continue
        out["warm_up_s"] = round(time.perf_counter() - started, 1)
        if gc_mode == "serve":  # the collector as `serve` and `mcp` set it once started (gcpause.py)
            gcpause.settle()
        out["gc"] = gc_mode
        settled = time.perf_counter() + settle_s
        while time.perf_counter() < settled:
            for _, body in searched:
                await engine.search(SearchParams.of({**body, "limit": 10}))
        for rep in range(reps + 1):  # interleaved class by class; round 0 warms up
            for name, body in searched:
                started = time.perf_counter()
                try:
                    result = await engine.search(SearchParams.of({**body, "limit": 10}))
                    assert result["results"], name
                except Exception as exc:  # noqa: BLE001 - counted: the run measures what fails too
                    label = f"{type(exc).__name__}: {str(exc)[:80]}"
                    errors[name][label] = errors[name].get(label, 0) + 1
                    continue
                finally:
                    peak_fd, peak_rss = max(peak_fd, open_files()), max(peak_rss, rss_mib())
                if rep:
                    times[name].append((time.perf_counter() - started) * 1000)
                else:  # the first time this process is asked the word (nothing of it kept in memory)
                    first[name] = round((time.perf_counter() - started) * 1000, 2)
        for name, ms in times.items():
            out["classes"][name] = {"p50_ms": round(pct(ms, 0.5), 2) if ms else None,  # None: every one failed
                                    "p95_ms": round(pct(ms, 0.95), 2) if ms else None,
                                    "first_ms": first.get(name),
                                    "n": len(ms), **({"errors": errors[name]} if errors[name] else {})}
        out["open_files_peak"] = peak_fd - before_open
        out["open_files_peak_process"] = peak_fd
        out["rss_peak_mib"] = round(peak_rss, 1)
        if writes is not None:
            out["writes"] = streaming.figures()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=50, help="messages per agent")
    parser.add_argument("--reps", type=int, default=10, help="searches per class (after one warm-up round)")
    parser.add_argument("--label", default="after")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="search_agents_concurrency (default the setting's; 0: every agent at once)")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="PostgreSQL server URL; a scratch database on it holds the corpus")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--fold", action="store_true",
                        help="measure the store as built (built_classes), then after the worker's check "
                             "folds the score bounds (classes)")
    parser.add_argument("--code", default=None,
                        help="what the figures are of, saved with them (default the checkout's commit)")
    parser.add_argument("--shapes", default=None,
                        help="several shapes AGENTSxMESSAGES, comma-separated (e.g. 10x50,100x50,1000x50); "
                             "default the one of --agents and --messages")
    parser.add_argument("--gc", choices=("serve", "default"), default="serve",
                        help="the garbage collector as the server sets it (gcpause.py), or CPython's default")
    parser.add_argument("--writes", type=float, default=0,
                        help="then measure again while this many messages a second are appended to random "
                             "agents, the worker's check folding beside them (writes_classes)")
    parser.add_argument("--writes-warm-s", type=float, default=40,
                        help="seconds of writes before the searches under writes start")
    parser.add_argument("--writes-settle-s", type=float, default=0,
                        help="then seconds of untimed searches before the timed ones: a process's first "
                             "searches under writes run 3-4x slower for some 30-40 s, and this measures after")
    parser.add_argument("--db-prefix", default="ss_bench_",
                        help="PostgreSQL database names start with this (a shared server: keep runs apart)")
    parser.add_argument("--written", action="store_true",
                        help="the state users are in: each shape built afresh, measured right after the appends "
                             "(written_classes), under --writes (writes_classes), then folded (classes)")
    parser.add_argument("--variants", default=None,
                        help="with --written: e.g. before,after: each shape and store once per variant, "
                             "alternating, in child processes (before: the code of --base)")
    parser.add_argument("--base", default="main", help="the commit the `before` variant runs")
    parser.add_argument("--after", default=None, help="the commit the `after` variant runs (default this checkout)")
    parser.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--timeline", type=float, default=0,
                        help="with --written: only a fresh process's first SECONDS of searches under --writes, "
                             "per 5 s (the first-process transient)")
    parser.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variants:
        drive(args)
        return
    sslogging.configure("WARNING")
    extra = {}
    if args.concurrency is not None:
        extra["search_agents_concurrency"] = args.concurrency or 1_000_000
    shapes = parse_shapes(args.shapes) if args.shapes else [(args.agents, args.messages)]
    code = commit()
    path = HERE / "results" / "agents.json"
    for agents, messages in shapes:
        if args.written:
            await run_written(args, extra, path, agents, messages)
        else:
            await run_shape(args, extra, code, path, agents, messages)


def export_base(rev: str) -> tuple[Path, str]:
    """The `sessionsearch/` tree of `rev` in a scratch dir (imported by the `before` children), and its commit."""
    sha = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    root = HERE / "work" / f"base-{sha}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", sha, "sessionsearch"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return root, sha


def drive(args: argparse.Namespace) -> None:
    """Each shape and store once per variant, alternating, each in a child process of its own."""
    base, sha = export_base(args.base) if "before" in args.variants.split(",") else (None, "")
    # `after` of a commit too, when named: this checkout may change while the run goes on
    after, after_sha = export_base(args.after) if args.after else (None, commit())
    shapes = args.shapes or f"{args.agents}x{args.messages}"
    for shape in shapes.split(","):
        for store in args.stores.split(","):
            for variant in args.variants.split(","):
                cmd = [sys.executable, __file__, "--written", "--shapes", shape, "--stores", store,
                       "--reps", str(args.reps), "--writes", str(args.writes), "--writes-warm-s", str(args.writes_warm_s),
                       "--pg", args.pg, "--db-prefix", args.db_prefix, "--gc", args.gc, "--variant", variant,
                       "--timeline", str(args.timeline)]
                if variant == "before":
                    cmd += ["--tree", str(base), "--label", "written-before"]
                else:
                    cmd += ["--label", "written-after"] + (["--tree", str(after)] if after else [])
                print(f"== {shape} {store} {variant}", flush=True)
                subprocess.run(cmd, check=True, env={**os.environ, "BENCH_CODE_COMMIT": sha if variant == "before"
                                                     else after_sha})


async def timeline(settings: Settings, agents: int, rate: float, seconds: float) -> dict:
    """A process's first searches while writes flow: from its first search on, the relevance and
    `recent` classes over every agent in turn for `seconds`, each search's time and what the
    SQLite stores' bounds cost it (bound statements read, bounds answered from memory), and the
    times each search ran its query (more than once: scoped and searched again), per 5 s."""
    from sessionsearch.search import runner  # noqa: PLC0415 - the tree under test's
    from sessionsearch.store.sqlite.store import SqliteAgentStore  # noqa: PLC0415

    counts = {"read": 0, "known": 0, "runs": 0}
    read, known = SqliteAgentStore.score_bound_direct, SqliteAgentStore.known_bound
    run_query = runner.run_query

    async def counted_run(*a, **k):  # type: ignore[no-untyped-def]
        counts["runs"] += 1  # more than one a search: scoped and searched again (issue 40)
        return await run_query(*a, **k)

    def counted_read(self, *a, **k):  # type: ignore[no-untyped-def]
        counts["read"] += 1
        return read(self, *a, **k)

    def counted_known(self, *a, **k):  # type: ignore[no-untyped-def]
        found = known(self, *a, **k)
        counts["known"] += found is not None
        return found

    SqliteAgentStore.score_bound_direct, SqliteAgentStore.known_bound = counted_read, counted_known  # type: ignore[method-assign]
    runner.run_query = counted_run  # type: ignore[assignment]
    samples: list[tuple[float, str, float, int, int, int]] = []
    try:
        async with Engine(settings=settings) as engine, Writes(engine, agents, rate):
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                for word, match, order in CLASSES:
                    before = dict(counts)
                    started = time.perf_counter()
                    await engine.search(SearchParams(query=word, match=match, order=order, limit=10))
                    samples.append((started - t0, f"{word} {match} {order}", (time.perf_counter() - started) * 1000,
                                    counts["read"] - before["read"], counts["known"] - before["known"],
                                    counts["runs"] - before["runs"]))
    finally:
        SqliteAgentStore.score_bound_direct, SqliteAgentStore.known_bound = read, known  # type: ignore[method-assign]
        runner.run_query = run_query  # type: ignore[assignment]
    windows = []
    for start in range(0, int(seconds), 5):
        got = [x for x in samples if start <= x[0] < start + 5]
        if got:
            windows.append({"from_s": start, "p50_ms": round(pct([x[2] for x in got], 0.5), 1),
                            "p95_ms": round(pct([x[2] for x in got], 0.95), 1), "n": len(got),
                            "bounds_read_per_search": round(sum(x[3] for x in got) / len(got), 1),
                            "bounds_known_per_search": round(sum(x[4] for x in got) / len(got), 1),
                            "runs_per_search": round(sum(x[5] for x in got) / len(got), 1)})
    return {"windows": windows}


async def run_written(args: argparse.Namespace, extra: dict, path: Path, agents: int, messages: int) -> None:
    """One shape on each store as a gateway leaves it: built afresh, searched right after the
    appends with no fold (written_classes), then under writes (writes_classes), then folded (classes)."""
    shape = f"{agents}x{messages}"
    variant = args.variant or "here"
    work = HERE / "work" / f"written-{shape}-{variant}"
    for store in args.stores.split(","):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        if store == "sqlite":
            settings = Settings(data_dir=str(work / "data"), **extra)
            name = None
        else:
            name = f"{args.db_prefix}written_{shape}_{variant}"
            with psycopg.connect(args.pg, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                admin.execute(f'CREATE DATABASE "{name}"')
            settings = Settings(data_dir=str(work / "pg-data"), database_url=url_of(args.pg, name), **extra)
        try:
            started = time.perf_counter()
            await build(settings, agents, messages)
            built_s = time.perf_counter() - started
            if name is not None:  # as autovacuum's analyze leaves the tables within a minute of an import
                with psycopg.connect(settings.database_url, autocommit=True) as conn:
                    conn.execute("ANALYZE")
            load = [round(os.getloadavg()[0], 2)]
            if args.timeline:  # the process's first searches, while writes flow
                line = await timeline(settings, agents, args.writes or 10, args.timeline)
                print(shape, store, variant, "timeline", json.dumps(line["windows"]), flush=True)
                results = json.loads(path.read_text()) if path.exists() else {}
                results.setdefault(args.label + "-timeline", {}).setdefault(shape, {})[store] = line
                path.write_text(json.dumps(results, indent=2) + "\n")
                return
            written = await measure(settings, args.reps, args.gc, one_agent=True)
            under = None
            if args.writes:
                under = await measure(settings, args.reps, args.gc, (agents, messages, args.writes, args.writes_warm_s),
                                      one_agent=True)
            started = time.perf_counter()
            folded_agents = await fold_due(settings)
            fold_s = time.perf_counter() - started
            folded = await measure(settings, args.reps, args.gc, one_agent=True)
            load.append(round(os.getloadavg()[0], 2))
        finally:
            if name is not None:
                with psycopg.connect(args.pg, autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            shutil.rmtree(work, ignore_errors=True)
        figures = {"written_classes": written["classes"], "classes": folded["classes"],
                   "written": {k: v for k, v in written.items() if k != "classes"},
                   "folded": {k: v for k, v in folded.items() if k != "classes"},
                   "folded_agents": folded_agents, "fold_s": round(fold_s, 1), "build_s": round(built_s, 1),
                   "load_avg_1m": load, "reps": args.reps,
                   "code": os.environ.get("BENCH_CODE_COMMIT") or commit(), "variant": variant}
        if under is not None:
            figures.update(writes_classes=under["classes"],
                           under_writes={k: v for k, v in under.items() if k != "classes"})
        print(shape, store, variant, json.dumps({k: figures[k] for k in figures if not k.endswith("classes")}),
              flush=True)
        for key in ("written_classes", "writes_classes", "classes"):
            for cls, f in figures.get(key, {}).items():
                print(f"  {key:16} {cls:34} p50 {f['p50_ms']} p95 {f['p95_ms']} first {f['first_ms']}", flush=True)
        results = json.loads(path.read_text()) if path.exists() else {}
        run = results.setdefault(args.label, {}).setdefault(shape, {})
        run.update(machine=f"{platform.machine()}, {os.cpu_count()} cores")
        run[store] = figures
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(results, indent=2) + "\n")


async def run_shape(args: argparse.Namespace, extra: dict, code: str, path: Path, agents: int, messages: int) -> None:
    shape = f"{agents}x{messages}"
    work = HERE / "work" / f"agents-{shape}"
    work.mkdir(parents=True, exist_ok=True)
    for store in args.stores.split(","):
        if store == "sqlite":
            settings = Settings(data_dir=str(work / "data"), **extra)
        else:
            name = f"{args.db_prefix}agents_{shape}"
            with psycopg.connect(args.pg, autocommit=True) as admin:
                if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                    admin.execute(f'CREATE DATABASE "{name}"')
            settings = Settings(data_dir=str(work / "pg-data"), database_url=url_of(args.pg, name), **extra)
        started = time.perf_counter()
        await build(settings, agents, messages)
        built_s = time.perf_counter() - started
        if store != "sqlite":  # as autovacuum's analyze leaves the tables within a minute of an import
            # (a server may run with it off, as CI's does: the planner then guesses every estimate)
            with psycopg.connect(settings.database_url, autocommit=True) as conn:
                conn.execute("ANALYZE")
        load_before = os.getloadavg()[0]
        figures = await measure(settings, args.reps, args.gc)
        if args.fold:  # then as the worker's check leaves it: every due agent's score bounds folded first
            built = figures
            started = time.perf_counter()
            folded = await fold_due(settings)
            figures = await measure(settings, args.reps, args.gc)
            figures.update(built_classes=built["classes"], folded_agents=folded,
                           fold_s=round(time.perf_counter() - started, 1))
        if args.writes:  # the steady state of a gateway streaming into the agents
            under = await measure(settings, args.reps, args.gc, (agents, messages, args.writes, args.writes_warm_s),
                                  args.writes_settle_s)
            figures.update(writes_classes=under["classes"], writes=under["writes"],
                           writes_settle_s=args.writes_settle_s)
        figures["load_avg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        figures["build_s"] = round(built_s, 1)
        figures["reps"] = args.reps
        figures["code"] = args.code or code
        print(shape, store, json.dumps(figures, indent=1), flush=True)
        # read again before each write: a run of one store or shape keeps the others' figures
        results = json.loads(path.read_text()) if path.exists() else {}
        run = results.setdefault(args.label, {}).setdefault(shape, {})
        run.pop("code", None)  # each store's figures name their own code: the other's may be older
        run.update(machine=f"{platform.machine()}, {os.cpu_count()} cores",
                   search_agents_concurrency=extra.get("search_agents_concurrency",
                                                       Settings().search_agents_concurrency))
        run[store] = figures
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
