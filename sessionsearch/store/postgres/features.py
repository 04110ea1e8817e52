"""What the PostgreSQL backend can do (store.base.Features), and for which queries."""

from __future__ import annotations

from functools import lru_cache

from ..base import Features, Match, QueryFeatures
from .query import Query
from .wide import is_wide

# every agent in one database: one statement reads many agents (search_many.py) and bounds them
# (bounds.py); nothing is kept in memory, and each agent's own statement is a task of its own
FEATURES = Features(many_in_one_statement=True, batches_agents=False, bounds_in_memory=False)


@lru_cache(maxsize=1024)  # asked once per search of many agents: a query repeats
def query_features(match: Match) -> QueryFeatures:
    """One statement of many agents, and bounds, for a query with lexemes and not very many words
    (wide.py: those search each agent by itself); no bounds for a query of any word (Match.any:
    bounds.py's bound assumes every phrase in the row)."""
    q = Query(match.cut())  # an any-word query: as many words as it ORs
    fits = bool(q.lexemes) and not is_wide(q)
    return QueryFeatures(many_in_one_statement=fits, score_bounds=fits and not match.any)
