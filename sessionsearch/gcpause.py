"""The garbage collector of a process that serves searches, set for short pauses.

A search over a thousand agents allocates tens of thousands of container objects (hits, scopes,
rows); at CPython's default thresholds that ran a full collection every dozen searches or so, each
walking every long-lived object (the stores, the catalog views, the per-agent caches): most of the
gap between a search's median and its 95th percentile (docs/architecture/decisions.md, "Search
pauses"). What is alive once the process is ready is frozen (never scanned again), and the
youngest generation is collected after 50,000 allocations rather than 700, so the young garbage
of a search goes in one cheap collection and older generations are reached rarely.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 100)


def settle() -> None:
    """Call once the process's long-lived state is built (the engine open), before serving."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
