"""What the SQLite backend can do (store.base.Features), and for which queries."""

from __future__ import annotations

from functools import lru_cache

from ..base import Features, Match, QueryFeatures
from .bounds import bound_query

# a database per agent: no statement reads many agents; a batch of agents' statements runs on one
# thread a hop (search_many.py); bounds are folded and kept per file stamp (bounds.py)
FEATURES = Features(many_in_one_statement=False, batches_agents=True, bounds_in_memory=True)


@lru_cache(maxsize=1024)  # asked once per search of many agents: a query repeats
def query_features(match: Match) -> QueryFeatures:
    """Bounds for a query whose every phrase has a token (bounds.bound_query)."""
    return QueryFeatures(many_in_one_statement=False, score_bounds=bound_query(match) is not None)
