"""Draw the docs' performance plots from the benchmarks' saved JSON (bench/results/*.json).

    .venv/bin/python bench/plots.py [--results bench/results] [--out docs/img]    (or: make plots)

Each plot uses only figures a benchmark measured and saved; a series with no data yet is left out
and named in the plot's note (printed, and drawn under the plot), never filled in. Rerunning a
benchmark and then this script redraws the PNGs the Performance page shows.

- search-classes.png: p50 per query class at the largest corpus, ours next to bare FTS5
  (bench_search.py: search.json, or search-<messages>.json for other sizes);
- search-growth.png: the same per corpus size, from every search*.json there is;
- throughput.png: append + index, import and reconciliation rates next to bare FTS5 inserts
  (search*.json, pipeline.json);
- http.png: HTTP latency under concurrency, idle and while a worker reconciles (http.json);
- readers.png: how readers read while another process writes (cache.json).
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


def plot_search_growth(runs: dict[int, dict], out: Path) -> Path | None:
    if not runs:
        return None
    sizes = sorted(runs)
    keys = [k for k in ("rare", "mid_0.3pct", "common_1pct", "common_10pct", "recent")
            if any(k in runs[s]["queries"] for s in sizes)]
    fig, axes = plt.subplots(1, len(keys), figsize=(2.3 * len(keys) + 1, 3.6), sharex=True)
    for ax, key in zip(axes, keys):
        have = [s for s in sizes if key in runs[s]["queries"]]
        ours = [runs[s]["queries"][key]["ours_p50_ms"] for s in have]
        bare = [runs[s]["queries"][key]["bare_aiosqlite_p50_ms"] for s in have]
        ax.plot(have, ours, "o-", color=OURS, label="sessionsearch")
        ax.plot(have, bare, "s--", color=BARE, label="bare FTS5")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sizes, [f"{s / 1000:g}k" if s < 1_000_000 else f"{s / 1_000_000:g}M" for s in sizes])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "24" else ""))
        ax.set_xlim(sizes[0] / 1.6, sizes[-1] * 1.6)
        ax.set_title(dict(CLASSES)[key], fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("messages", fontsize=8)
    axes[0].set_ylabel("p50, ms (log)")
    axes[0].legend(fontsize=7)
    wanted = [100_000, 200_000, 500_000, 1_000_000]
    missing = [f"{n:,}" for n in wanted if n not in runs]
    notes = [f"corpus sizes measured: {', '.join(f'{s:,}' for s in sizes)} "
             f"(bench/results/{', '.join(runs[s]['_file'] for s in sizes)})"]
    if missing:
        notes.append(f"no run yet at {', '.join(missing)} messages: "
                     "bench/bench_search.py --messages N --sessions N/100 --out bench/results/search-N.json")
    fig.subplots_adjust(bottom=0.3, wspace=0.35, top=0.85)
    fig.suptitle("Search p50 as the corpus grows", fontsize=10)
    return _save(fig, out, "search-growth.png", notes)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(HERE / "results"), help="folder of the benchmarks' JSON")
    parser.add_argument("--out", default=str(HERE.parent / "docs" / "img"), help="folder for the PNGs")
    args = parser.parse_args(argv)
    results, out = Path(args.results), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = search_runs(results)
    drawn = [plot_search_classes(runs, out), plot_search_growth(runs, out),
             plot_throughput(runs, load(results, "pipeline.json"), out),
             plot_http(load(results, "http.json"), out), plot_readers(load(results, "cache.json"), out)]
    for path in drawn:
        if path:
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
