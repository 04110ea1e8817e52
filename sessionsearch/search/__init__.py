"""Query parsing and quoting, scope and visibility, ranking, snippets, budgets, history views."""
