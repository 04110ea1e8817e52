"""Draw the docs' performance plots from the benchmarks' saved JSON (bench/results/*.json).

    .venv/bin/python bench/plots.py [--results bench/results] [--out docs/img]    (or: make plots)

Each plot uses only figures a benchmark measured and saved; a series with no data yet is left out
and named in the plot's note (printed, and drawn under the plot), never filled in. Rerunning a
benchmark and then this script redraws the PNGs the Performance page shows.

- search-classes.png: p50 per query class at the largest corpus, ours next to bare FTS5
  (bench_search.py: search.json, or search-<messages>.json for other sizes);
- search-growth.png: p50 and p95 per query class per corpus size in one agent, SQLite (every
  search*.json) above PostgreSQL (bench_pg.py: pg.json, or pg-<messages>.json for other sizes),
  each next to its bare baseline;
- agents-growth.png: an operator search over every agent, p50 and p95 per class per agent count,
  SQLite and PostgreSQL side by side (bench_agents.py: agents.json, label "after");
- throughput.png: append + index, import and reconciliation rates next to bare FTS5 inserts
  (search*.json, pipeline.json);
- http.png: HTTP latency under concurrency, idle and while a worker reconciles (http.json);
- readers.png: how readers read while another process writes (cache.json);
- fresh-ingest.png: p95 per 10-second window after a live ingest, then under 10 writes a second,
  per query class, against its goal: 200,000 messages on both stores (bench_fresh.py: fresh.json,
  variant "after") and 1,000,000 (fresh-1000000.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

HERE = Path(__file__).resolve().parent
CLASSES = [("rare", "rare word"), ("mid_0.3pct", "0.3% word"), ("common_1pct", "1% word"),
           ("common_10pct", "10% word"), ("two_words", "two words"), ("prefix", "prefix"),
           ("recent", "0.3% word, recent"), ("session_scoped", "one session")]
OURS, BARE, BARE_MAPPED, EXTRA = "#1f77b4", "#999999", "#cccccc", "#2ca02c"


def load(folder: Path, name: str) -> dict | None:
    path = folder / name
    return json.loads(path.read_text()) if path.exists() else None


def search_runs(folder: Path) -> dict[int, dict]:
    """bench_search.py's runs by corpus size: search.json and one search-<messages>.json per other size."""
    runs: dict[int, dict] = {}
    for path in sorted(folder.glob("search*.json")):
        data = json.loads(path.read_text())
        if "queries" in data and "corpus" in data:
            data["_file"] = path.name
            runs[data["corpus"]["messages"]] = data
    return runs


def _note(fig, notes: list[str]) -> None:
    if notes:
        fig.text(0.01, 0.01, "\n".join(notes), fontsize=7, color="#555555", va="bottom")


def _save(fig, out: Path, name: str, notes: list[str]) -> Path:
    _note(fig, notes)
    path = out / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    for line in notes:
        print(f"{name}: {line}", file=sys.stderr)
    return path


def plot_search_classes(runs: dict[int, dict], out: Path) -> Path | None:
    if not runs:
        print("search-classes.png: no search*.json: run bench/bench_search.py", file=sys.stderr)
        return None
    size = max(runs)
    queries = runs[size]["queries"]
    postings = runs[size].get("postings", {})
    shown = [(key, label) for key, label in CLASSES if key in queries]
    fig, ax = plt.subplots(figsize=(9, 4.6))
    width = 0.2
    for i, (key, _label) in enumerate(shown):
        q = queries[key]
        ax.bar(i - 1.5 * width, q["ours_p50_ms"], width, color=OURS, label="sessionsearch" if i == 0 else None)
        ax.bar(i - 0.5 * width, q["bare_aiosqlite_p50_ms"], width, color=BARE, label="bare FTS5" if i == 0 else None)
        ax.bar(i + 0.5 * width, q["bare_aiosqlite_mapped_p50_ms"], width, color=BARE_MAPPED,
               label="bare FTS5, mapped" if i == 0 else None)
        if key in postings:
            ax.bar(i + 1.5 * width, postings[key]["postings_p50_ms"], width, color=EXTRA,
                   label="sessionsearch after optimize (postings)" if key == "common_1pct" else None)
        ax.text(i - 1.5 * width, q["ours_p50_ms"] * 1.08, f"{q['ratio_p50_vs_aiosqlite']:.2f}x",
                ha="center", fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(range(len(shown)), [label for _, label in shown], rotation=20, fontsize=8)
    ax.set_ylabel("p50 latency, ms (log)")
    ax.set_title(f"Search p50 at {size:,} messages, side by side with bare FTS5 "
                 f"({runs[size].get('when', '?')[:10]}; ratio to bare above each bar)", fontsize=9)
    ax.legend(fontsize=8)
    fig.subplots_adjust(bottom=0.22)
    return _save(fig, out, "search-classes.png", [f"source: bench/results/{runs[size]['_file']}"])


def pg_runs(folder: Path) -> dict[int, dict]:
    """bench_pg.py's runs by corpus size: pg.json and one pg-<messages>.json per other size."""
    runs: dict[int, dict] = {}
    for path in sorted(folder.glob("pg*.json")):
        data = json.loads(path.read_text())
        if "search" in data and "messages" in data:
            data["_file"] = path.name
            runs[data["messages"]] = data
    return runs


# class label -> (bench_search.py's key, bench_pg.py's key): the same words and shapes of query
GROWTH_CLASSES = [("rare word", "rare", "rare"), ("0.3% word", "mid_0.3pct", "mid_0.3pct"),
                  ("1% word", "common_1pct", "common_1pct"), ("10% word", "common_10pct", "common_10pct"),
                  ("two words", "two_words", "two_words"), ("4-letter prefix", "prefix", "prefix_4"),
                  ("0.3% word, recent", "recent", "recent_mid_0.3pct")]
GROWTH_SIZES = [100_000, 200_000, 500_000, 1_000_000]


def _size_label(s: int) -> str:
    return f"{s / 1000:g}k" if s < 1_000_000 else f"{s / 1_000_000:g}M"


def _log_axes(ax, xs: list[int], label) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(xs, [label(x) for x in xs])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "24" else ""))
    ax.set_xlim(xs[0] / 1.6, xs[-1] * 1.6)
    ax.tick_params(labelsize=7)


def _load(run: dict) -> str:
    """The load average a run saved around its searches (bench_search.py) or per class (bench_pg.py)."""
    if "queries_load_avg_1m" in run:
        return "-".join(f"{v:g}" for v in run["queries_load_avg_1m"])
    loads = [c["loadavg_1m"] for c in run.get("search", {}).values() if "loadavg_1m" in c]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else ""


def plot_search_growth(runs: dict[int, dict], pg: dict[int, dict], out: Path) -> Path | None:
    if not runs and not pg:
        return None
    # per store: its runs, how to read one class of a run, its baseline's name
    stores = [("SQLite", runs, lambda r, k: r["queries"].get(k), "ours_p50_ms", "ours_p95_ms",
               "bare_aiosqlite_p50_ms", "bare FTS5", 1),
              ("PostgreSQL", pg, lambda r, k: r["search"].get(k), "ours_p50_ms", "ours_p95_ms",
               "anchor_p50_ms", "bare tsvector + GIN", 2)]
    fig, axes = plt.subplots(2, len(GROWTH_CLASSES), figsize=(2.2 * len(GROWTH_CLASSES) + 1, 6.4), sharex=True)
    notes = []
    for row, (store, store_runs, get, p50, p95, bare, bare_name, key_at) in enumerate(stores):
        sizes = sorted(store_runs)
        for col, cls in enumerate(GROWTH_CLASSES):
            ax = axes[row][col]
            key = cls[key_at]
            have = [s for s in sizes if get(store_runs[s], key)]
            if have:
                ax.plot(have, [get(store_runs[s], key)[p50] for s in have], "o-", color=OURS,
                        label="sessionsearch p50")
                ax.plot(have, [get(store_runs[s], key)[p95] for s in have], "o:", color=OURS, alpha=0.6,
                        label="sessionsearch p95")
                ax.plot(have, [get(store_runs[s], key)[bare] for s in have], "s--", color=BARE,
                        label=f"{bare_name} p50")
            _log_axes(ax, GROWTH_SIZES, _size_label)
            if row == 0:
                ax.set_title(cls[0], fontsize=9)
            else:
                ax.set_xlabel("messages", fontsize=8)
        axes[row][0].set_ylabel(f"{store}\nms (log)", fontsize=9)
        if sizes:
            runs_said = "; ".join(f"{_size_label(s)}: {store_runs[s]['_file']}, code {store_runs[s].get('code', 'not saved')}"
                                  f"{', load ' + _load(store_runs[s]) if _load(store_runs[s]) else ''}" for s in sizes)
            notes.append(f"{store}: {runs_said}")
        missing = [f"{n:,}" for n in GROWTH_SIZES if n not in store_runs]
        if missing:
            how = ("bench/bench_search.py --messages N --sessions N/100 --out bench/results/search-N.json"
                   if store == "SQLite" else "bench/bench_pg.py --messages N --out pg-N")
            notes.append(f"{store}: no run yet at {', '.join(missing)} messages ({how})")
    notes.append("SQLite searched as built (no optimize); PostgreSQL after its postings build, as a worker's check "
                 "builds them; each size is its own run, which picks its words by frequency (a 4-letter prefix "
                 "of them expands to more or fewer words, bare alike)")
    legend: dict = {}
    for row_axes in axes:
        for handle, text in zip(*row_axes[0].get_legend_handles_labels()):
            legend.setdefault(text, handle)
    fig.legend(list(legend.values()), list(legend.keys()), loc="upper center", bbox_to_anchor=(0.5, 0.955),
               ncol=4, fontsize=7, frameon=False)
    fig.subplots_adjust(bottom=0.2, wspace=0.4, hspace=0.15, top=0.85, left=0.06, right=0.99)
    fig.suptitle("Search in one agent as the corpus grows: p50 and p95 per query class", fontsize=10)
    return _save(fig, out, "search-growth.png", notes)


# bench_agents.py's classes: (word, match) rows, relevance and recent in each
AGENT_ROWS = [("zephyr", "exact", "rare word"), ("alpha", "exact", "a word in every message"),
              ("zep", "prefix", "rare prefix"), ("alp", "prefix", "common prefix")]
AGENT_COUNTS = [10, 100, 1000]
ORDERS = [("relevance", OURS), ("recent", "#ff7f0e")]


def plot_agents_growth(agents: dict | None, out: Path, label: str = "after") -> Path | None:
    if not agents or label not in agents:
        print("agents-growth.png: no agents.json figures under 'after': run bench/bench_agents.py "
              "--label after --shapes 10x50,100x50,1000x50", file=sys.stderr)
        return None
    run = agents[label]
    stores = [("sqlite", "SQLite"), ("postgres", "PostgreSQL")]
    fig, axes = plt.subplots(len(AGENT_ROWS), 2, figsize=(8.5, 10), sharex=True, sharey="row")
    notes = []
    for col, (store, store_name) in enumerate(stores):
        by_count = {int(shape.split("x")[0]): run[shape][store] for shape in run
                    if shape.endswith("x50") and store in run[shape]}
        big = run.get("1000x1000", {}).get(store)
        for row, (word, match, row_name) in enumerate(AGENT_ROWS):
            ax = axes[row][col]
            for order, color in ORDERS:
                name = f"{word} {match} {order}"
                have = [n for n in sorted(by_count) if by_count[n]["classes"].get(name, {}).get("p50_ms")]
                ax.plot(have, [by_count[n]["classes"][name]["p50_ms"] for n in have], "o-", color=color,
                        label=f"{order} p50")
                ax.plot(have, [by_count[n]["classes"][name]["p95_ms"] for n in have], "o:", color=color,
                        alpha=0.6, label=f"{order} p95")
                if big and big["classes"].get(name, {}).get("p50_ms"):
                    ax.plot([1000], [big["classes"][name]["p50_ms"]], "D", color=color, markersize=7,
                            label=f"{order} p50 (hollow: p95), 1,000 x 1,000" if row == 0 else None)
                    ax.plot([1000], [big["classes"][name]["p95_ms"]], "D", color=color, markersize=7,
                            fillstyle="none")
                failed = [(f"{n:,} x 50", by_count[n]["classes"].get(name, {})) for n in sorted(by_count)]
                failed += [("1,000 x 1,000", big["classes"].get(name, {}))] if big else []
                for shape, figures in failed:
                    if figures.get("errors"):
                        kinds = "; ".join(f"{count} x {kind.split(':')[0]}" for kind, count in figures["errors"].items())
                        notes.append(f"{store_name} {shape}, {name}: {figures['n']} answered, {kinds}")
                if big and big["classes"].get(name, {}).get("errors") and not big["classes"][name].get("p50_ms"):
                    ax.text(0.97, 0.95 if order == "relevance" else 0.05,
                            f"1,000 x 1,000, {order}: every search failed ({big['classes'][name]['n']} answered)",
                            transform=ax.transAxes, fontsize=6.5, color=color, ha="right",
                            va="top" if order == "relevance" else "bottom")
            ax.axhline(100, color="#d62728", linewidth=0.8, linestyle="--", label="goal: p95 100 ms")
            _log_axes(ax, AGENT_COUNTS, lambda n: f"{n:,}")
            if col == 0:
                ax.set_ylabel(f"{row_name}\n\"{word}\" {match}\nms (log)", fontsize=8)
            if row == 0:
                ax.set_title(store_name, fontsize=10)
        axes[-1][col].set_xlabel("agents (50 messages each; diamonds: 1,000 messages each)", fontsize=8)
        counts = sorted(by_count)
        if counts:
            loads = ", ".join(f"{n}: {by_count[n]['load_avg_1m'][0]:g}-{by_count[n]['load_avg_1m'][1]:g}"
                              for n in counts)
            codes = sorted({str(by_count[n].get("code", "?")) for n in counts} | ({str(big.get("code", "?"))} if big else set()))
            notes.append(f"{store_name}: {', '.join(f'{n:,}' for n in counts)} agents x 50 messages"
                         f"{', and 1,000 x 1,000' if big else ''}; code {', '.join(codes)}")
            notes.append(f"    load average {loads}"
                         f"{', 1000x1000: ' + '-'.join(f'{v:g}' for v in big['load_avg_1m']) if big else ''}")
        missing = [f"{n:,} x 50" for n in AGENT_COUNTS if n not in by_count] + ([] if big else ["1,000 x 1,000"])
        if missing:
            notes.append(f"{store_name}: no run yet at {', '.join(missing)} (agents x messages)")
    axes[0][0].legend(fontsize=6, loc="upper left")
    notes.append(f"bench/results/agents.json, label \"{label}\": an operator search over every agent (no agentId), "
                 f"limit 10, {next(iter(run.values())).get('sqlite', {}).get('reps', '?')} searches per class after a warm-up round")
    fig.subplots_adjust(bottom=0.15, hspace=0.12, wspace=0.08, top=0.93, left=0.14, right=0.98)
    fig.suptitle("Search over every agent as agents are added: p50 and p95 per query class", fontsize=10)
    return _save(fig, out, "agents-growth.png", notes)


def plot_throughput(runs: dict[int, dict], pipeline: dict | None, out: Path) -> Path | None:
    bars: list[tuple[str, float, float | None]] = []  # label, ours, bare beside it
    notes = []
    if runs:
        size = max(runs)
        run = runs[size]
        bars.append(("append, batches of 100", run["build"]["ours_batch100_msgs_per_s"],
                     run["build"]["bare_batch100_msgs_per_s"]))
        bars.append(("append, 1 per transaction", run["single_tx"]["ours_single_tx_msgs_per_s"],
                     run["single_tx"]["bare_single_tx_msgs_per_s"]))
        notes.append(f"appends: bench/results/{run['_file']} ({size:,} messages)")
    if pipeline:
        bare = pipeline.get("bare_fts5_bulk_insert_msgs_per_s")
        bars.append(("import (events/s)", pipeline["import"]["events_per_s"], None))
        bars.append(("reconcile in-process", pipeline["in_process"]["msgs_per_s"], bare))
        for r in pipeline["reconcile"]:
            bars.append((f"reconcile, {r['processes']} worker process{'es' if r['processes'] > 1 else ''}, "
                         f"{r['cpu_priority']} CPU", r["reconcile_msgs_per_s"], bare))
        notes.append(f"import and reconcile: bench/results/pipeline.json "
                     f"({pipeline['corpus']['messages']:,} messages in {pipeline['corpus']['sessions']:,} sessions); "
                     "bare = a bulk FTS5 insert of the same rows")
    else:
        notes.append("no pipeline.json: run bench/bench_pipeline.py for import and reconcile rates")
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(bars) + 1.6))
    for i, (_label, ours, bare) in enumerate(bars):
        ax.barh(i + 0.2, ours, 0.4, color=OURS, label="sessionsearch" if i == 0 else None)
        if bare is not None:
            ax.barh(i - 0.2, bare, 0.4, color=BARE, label="bare FTS5" if i == 0 else None)
            ax.text(ours, i + 0.2, f" {ours:,.0f} ({ours / bare:.2f}x)", va="center", fontsize=7)
        else:
            ax.text(ours, i + 0.2, f" {ours:,.0f}", va="center", fontsize=7)
    ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("messages per second")
    ax.set_title("Write throughput next to bare FTS5", fontsize=10)
    ax.set_xlim(0, max(max(b[1], b[2] or 0) for b in bars) * 1.35)
    ax.legend(fontsize=8, loc="lower right")
    fig.subplots_adjust(left=0.33, bottom=0.22, right=0.97)
    return _save(fig, out, "throughput.png", notes)


def plot_http(http: dict | None, out: Path) -> Path | None:
    if not http:
        print("http.png: no http.json: run bench/bench_http.py", file=sys.stderr)
        return None
    phases = [(k, label) for k, label in (("idle_8_clients", "8 clients, idle"), ("idle", "32 clients, idle"),
                                          ("busy", "32 clients, worker reconciling"))
              if k in http]
    fig, (ax, rate) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [3, 1.3]})
    width = 0.13
    for i, (key, _) in enumerate(phases):
        for j, (side, color) in enumerate((("http", OURS), ("python_api", BARE))):
            for k, pct in enumerate(("p50_ms", "p95_ms", "p99_ms")):
                x = i + (j * 3 + k - 2.5) * width
                ax.bar(x, http[key][side][pct], width, color=color, alpha=1.0 - 0.3 * k,
                       label=f"{'HTTP' if side == 'http' else 'Python API'} {pct[:3]}" if i == 0 else None)
        rate.bar(i, http[key]["http"]["requests_per_s"], 0.6, color=OURS)
        rate.text(i, http[key]["http"]["requests_per_s"], f"{http[key]['http']['requests_per_s']:.0f}",
                  ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(phases)), [label for _, label in phases], fontsize=8)
    ax.set_ylabel("latency, ms")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("0.3% words over HTTP (wrk, loopback) and through the Python API", fontsize=9)
    rate.set_xticks(range(len(phases)), [label.replace(", ", "\n") for _, label in phases], fontsize=7)
    rate.set_title("HTTP requests/s", fontsize=9)
    fig.subplots_adjust(bottom=0.25, wspace=0.3)
    return _save(fig, out, "http.png", [f"source: bench/results/http.json ({http.get('seconds', '?')} s a phase)"])


def plot_readers(cache: dict | None, out: Path) -> Path | None:
    if not cache:
        print("readers.png: no cache.json: run bench/bench_cache.py", file=sys.stderr)
        return None
    modes = [("default_map_when_quiet", "map when quiet (default)", OURS), ("never_map", "never map", BARE),
             ("always_map", "always map", "#ff7f0e"), ("cache_32mb", "32 MiB cache", EXTRA)]
    phases = [("no_writer", "no writer"), ("append_every_1000ms", "append every 1 s"),
              ("append_every_100ms", "every 100 ms"), ("append_every_5ms", "every 5 ms")]
    phases = [(k, label) for k, label in phases if k in cache["phases"]]
    search = "mid_0.3pct_relevance"
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.2
    for i, (phase, _) in enumerate(phases):
        for j, (mode, label, color) in enumerate(modes):
            ax.bar(i + (j - 1.5) * width, cache["phases"][phase][search][mode]["p50_ms"], width, color=color,
                   label=label if i == 0 else None)
    ax.set_xticks(range(len(phases)), [label for _, label in phases], fontsize=8)
    ax.set_ylabel("p50, ms")
    ax.set_title("0.3% word search while another process appends: how readers read", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    fig.subplots_adjust(bottom=0.2)
    return _save(fig, out, "readers.png", ["source: bench/results/cache.json"])


FRESH_CLASSES = [("prefix_1", "1-letter prefix", "#17becf"), ("prefix_2", "2-letter prefix", "#1f77b4"),
                 ("prefix_3", "3-letter prefix", "#ff7f0e"), ("prefix_5", "5-letter prefix", "#2ca02c"),
                 ("prefix_8", "8-letter prefix", "#8c564b"), ("word_10pct", "10% word", "#d62728"),
                 ("recent_10pct", "10% word, recent", "#e377c2"), ("word_rare", "rare word", "#9467bd")]


def fresh_runs(folder: Path) -> list[tuple[str, str, dict]]:
    """bench_fresh.py's "after" runs (title, commit, run), titled by store and size: fresh.json's
    per store, and each fresh-<messages>.json's."""
    found: list[tuple[str, str, dict]] = []
    small = load(folder, "fresh.json")
    for store, by_store in (small or {}).get("runs_by_store", {}).items():
        for run in by_store["runs"]:
            if run["variant"] == "after":
                found.append((f"{store}, {run['messages']:,} messages", by_store.get("after_commit") or "?", run))
    for run in (small or {}).get("runs", []):
        if run["variant"] == "after":
            found.append((f"{run['store']}, {run['messages']:,} messages", small.get("after_commit") or "?", run))
    for path in sorted(folder.glob("fresh-*.json")):
        data = json.loads(path.read_text())
        for run in data.get("runs", []):
            if run["variant"] == "after":
                code = run.get("after_commit") or data.get("after_commit") or "?"
                found.append((f"{run['store']}, {run['messages']:,} messages", code, run))
    return found


def plot_fresh(runs: list[tuple[str, str, dict]], out: Path) -> Path | None:
    if not runs:
        print("fresh-ingest.png: no fresh*.json: run bench/bench_fresh.py", file=sys.stderr)
        return None
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.9 * len(runs)), sharex=True, squeeze=False)
    notes = []
    for ax, (title, code, run) in zip(axes[:, 0], runs, strict=True):
        for name, label, color in FRESH_CLASSES:
            windows = run["after"].get(name, {}).get("windows", [])
            ax.plot([w["from_s"] + 5 for w in windows], [w["p95_ms"] for w in windows], marker=".", color=color,
                    label=label)
        bare = [w for w in run["after"].get("prefix_3", {}).get("windows", []) if "bare_p95_ms" in w]
        if bare:  # the bare engine (FTS5 / GIN + ts_rank) on the same texts, in the same rounds
            ax.plot([w["from_s"] + 5 for w in bare], [w["bare_p95_ms"] for w in bare], color="#7f7f7f",
                    linestyle="--", linewidth=1.0, label="bare engine, 3-letter prefix")
        for goal, style in ((100, "--"), (50, ":"), (10, "-.")):
            ax.axhline(goal, color="#d62728", linestyle=style, linewidth=0.8)
        if run.get("writes_from_s") is not None:  # from here on, 10 messages a second are appended
            ax.axvline(run["writes_from_s"], color="#555555", linewidth=1.0)
        for build in run.get("builds", []):
            if build["end_s"] > 0:  # a build that ended during the ingest is not drawn
                ax.axvspan(max(0.0, build["start_s"]), build["end_s"], color="#eeeeee", zorder=0)
        ax.set_yscale("log")
        ax.set_ylabel("p95, ms (log)")
        ax.set_title(f"{title}: ingest {run['ingest_s']:.0f} s, then searches from its end", fontsize=9)
        notes.append(f"{title}: code {code[:7]}")
    axes[0, 0].legend(fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("seconds after the last append returned (grey: a postings build running; black line: "
                           "10 writes a second from there;\nred: goals, prefixes 100 ms dashed, the 10% word 50 ms "
                           "dotted, recent 10 ms dash-dot; dashed grey: the bare engine's 3-letter prefix)", fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return _save(fig, out, "fresh-ingest.png", [*notes, "source: bench/results/fresh.json, fresh-<messages>.json"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(HERE / "results"), help="folder of the benchmarks' JSON")
    parser.add_argument("--out", default=str(HERE.parent / "docs" / "img"), help="folder for the PNGs")
    args = parser.parse_args(argv)
    results, out = Path(args.results), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = search_runs(results)
    drawn = [plot_search_classes(runs, out), plot_search_growth(runs, pg_runs(results), out),
             plot_agents_growth(load(results, "agents.json"), out),
             plot_throughput(runs, load(results, "pipeline.json"), out),
             plot_http(load(results, "http.json"), out), plot_readers(load(results, "cache.json"), out),
             plot_fresh(fresh_runs(results), out)]
    for path in drawn:
        if path:
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
