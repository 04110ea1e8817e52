"""Small helpers the benchmarks share."""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values` by nearest rank; NaN when there are none."""
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


def commit() -> str:
    """The checkout's commit, saved beside figures: they are of the code it holds (marked when
    sessionsearch/ differs from it, as figures of uncommitted code are)."""
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=HERE, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" (with uncommitted changes)" if git("status", "--porcelain", "--", "../sessionsearch") else "")
