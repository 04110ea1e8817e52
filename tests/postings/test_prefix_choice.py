"""Which prefixes get postings, and which share a shorter one's (store/prefix_choice.py)."""

from __future__ import annotations

from sessionsearch.store.prefix_choice import choose_prefixes


def test_a_prefix_beginning_the_same_terms_as_a_shorter_one_shares_its_postings():
    terms = [("alphabet", 30), ("alphabetic", 20), ("alphanumeric", 40), ("alpine", 5), ("beta", 60)]
    chosen, same = choose_prefixes(terms, min_len=1, max_len=8, min_docs=40, max_prefixes=100,
                                   usable=lambda p: p.isalnum())
    assert {"a", "al", "alp", "alph", "alpha", "alphab", "alphabe", "alphabet", "alphan", "b", "beta"} <= chosen
    assert "alphabeti" not in chosen  # nine letters
    # `al`…`alp` begin every a-term; `alph`, `alpha` leave out `alpine`; `alphab`… only the alphabet terms
    assert same["al"] == same["alp"] == "a"
    assert same["alpha"] == "alph" and "alph" not in same
    assert same["alphabe"] == same["alphabet"] == "alphab" and "alphab" not in same
    assert same["be"] == same["bet"] == same["beta"] == "b"
    _, fewer = choose_prefixes(terms, min_len=1, max_len=8, min_docs=40, max_prefixes=3, usable=lambda p: p.isalnum())
    assert fewer == {"al": "a", "alp": "a"}  # the three most frequent: a, al, alp
