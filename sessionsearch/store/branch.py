"""Moving a window's active branch to a new leaf by what changes, not by the whole window.

A window's rows with `on_branch = 1` are one path, from a root to the current leaf, and a row's
parent always has a lower seq (a child names a row already stored), so seqs rise along that path.
A non-linear write (a rewind, a side append, a parent that is not the leaf) moves the leaf; the
new branch is the walk up from the new leaf through rows not on the branch, to the first row that
is on it (the fork) or to a root. Every branch row past the fork's seq leaves the branch (they are
the old path below the fork: those before it are its ancestors), the rows walked join it, and the
rest stay as they are. A rewind of a few messages then writes those few rows, where re-deriving
the branch wrote every branch row of the window twice: on PostgreSQL under an append load that made
a rewind's cost grow with its window, and the dead row versions it left behind slowed every later
walk of the window (docs/architecture/decisions.md, 2026-12-08).

Each store walks in its own SQL (writer.py, _reproject); `moved` reads the rows of the walk.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .rowids import MAX_SEQ, seq_of, seq_ranges


@dataclass(frozen=True, slots=True)
class BranchMove:
    """What a new leaf changes: the rows (ids) joining the branch, and the id ranges whose branch
    rows leave it (every branch row past the fork)."""

    joining: list[int]
    leaving: list[tuple[int, int]]


def moved(wid: int, walked: Iterable[tuple[int, int]]) -> BranchMove:
    """The move a walk from the new leaf gives: `walked` is its (id, on_branch) rows, in any order:
    those off the branch from the leaf up, and the first row on it (the fork), if it met one."""
    joining: list[int] = []
    fork = -1
    for rid, on_branch in walked:
        if on_branch:
            fork = seq_of(rid)
        else:
            joining.append(rid)
    return BranchMove(joining, seq_ranges(wid, fork + 1, MAX_SEQ))
