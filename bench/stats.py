"""Small helpers the benchmarks share."""

from __future__ import annotations


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values` by nearest rank; NaN when there are none."""
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")
