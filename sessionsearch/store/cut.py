"""The hits of many stores that are among the top k of them all, for a backend answering
search_top_many store by store (where no one statement of them all answers the query)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .records import RowHit, TopHits


def top_of_all(tops: Sequence[TopHits], k: int, order: str) -> list[TopHits]:
    """Each store's TopHits with only those of its hits among the top `k` of all the stores' by
    `order` (then newer, then message id), and no MORE row (the caller cuts and says `more`)."""
    def key(hit: RowHit) -> tuple[Any, ...]:
        return (-hit.ts, hit.message_id) if order == "recent" else (hit.score, -hit.ts, hit.message_id)

    ranked = sorted(((key(h), i, h.row_id) for i, top in enumerate(tops) for h in top.hits if h.row_id),
                    key=lambda entry: entry[0])[:k]
    kept = {(i, rid) for _, i, rid in ranked}
    return [TopHits(top.meta_version, top.dirty, [h for h in top.hits if (i, h.row_id) in kept])
            for i, top in enumerate(tops)]
