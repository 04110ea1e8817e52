"""The path a keyword query takes over the agents in scope follows from what the backend declares
(store.base Features and QueryFeatures), never from probing it (search/plan.py)."""

import pytest

from sessionsearch.search.plan import Path, Scope, plan_keyword
from sessionsearch.store.base import Features, Match, QueryFeatures

SQLITE = Features(many_in_one_statement=False, batches_agents=True, bounds_in_memory=True)
POSTGRES = Features(many_in_one_statement=True, batches_agents=False, bounds_in_memory=False)
FITS = QueryFeatures(many_in_one_statement=True, score_bounds=True)  # PostgreSQL: a query of a few words
BOUNDED = QueryFeatures(many_in_one_statement=False, score_bounds=True)  # SQLite: every phrase has a token
WIDE = QueryFeatures(many_in_one_statement=False, score_bounds=False)  # PostgreSQL: very many words
NO_TOKENS = QueryFeatures(many_in_one_statement=False, score_bounds=False)  # SQLite: a phrase without tokens
K = 11


class Declared:
    """A backend as far as planning reads it: its features, and those of every query."""

    def __init__(self, features: Features, fits: QueryFeatures) -> None:
        self.features, self.fits = features, fits

    def query_features(self, match: Match) -> QueryFeatures:
        return self.fits


def _scopes(n: int, whole: bool = True) -> list[Scope]:
    return [Scope(f"a{i}", None if whole or i else [1], [], {1}) for i in range(n)]


@pytest.mark.parametrize(("features", "fits", "order", "agents", "whole", "path"), [
    (SQLITE, BOUNDED, "relevance", 1, True, Path.EACH),
    (POSTGRES, FITS, "recent", 1, True, Path.EACH),
    (SQLITE, BOUNDED, "recent", 5, True, Path.NEWEST_FIRST),
    (POSTGRES, FITS, "recent", 5, False, Path.NEWEST_FIRST),
    (SQLITE, BOUNDED, "relevance", 100, True, Path.BATCHED),
    (SQLITE, NO_TOKENS, "relevance", 100, False, Path.BATCHED),
    (POSTGRES, FITS, "relevance", 2 * K + 1, True, Path.TOGETHER_BEST_FIRST),
    (POSTGRES, FITS, "relevance", 2 * K, True, Path.TOGETHER),
    (POSTGRES, WIDE, "relevance", 100, True, Path.EACH),
    (POSTGRES, FITS, "relevance", 100, False, Path.EACH),
])
def test_the_path_follows_the_declared_features(features, fits, order, agents, whole, path):
    plan = plan_keyword(Declared(features, fits), Match(("w",)), order, _scopes(agents, whole), K)
    assert plan.path is path


def test_newest_first_hands_the_rest_to_one_statement_only_where_it_fits_and_whole_agents():
    many = _scopes(5)
    assert plan_keyword(Declared(POSTGRES, FITS), Match(("w",)), "recent", many, K).together
    assert not plan_keyword(Declared(POSTGRES, WIDE), Match(("w",)), "recent", many, K).together
    assert not plan_keyword(Declared(POSTGRES, FITS), Match(("w",)), "recent", _scopes(5, whole=False), K).together
    sqlite = plan_keyword(Declared(SQLITE, BOUNDED), Match(("w",)), "recent", many, K)
    assert sqlite.kept and sqlite.whole and not sqlite.together


def test_a_hybrid_querys_keyword_part_is_never_newest_first():
    plan = plan_keyword(Declared(SQLITE, BOUNDED), Match(("w",)), "recent", _scopes(5), K, by_newest=False)
    assert plan.path is Path.BATCHED and not plan.bounds  # by recent: no score bounds
