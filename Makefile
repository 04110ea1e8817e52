# Two commands do all the set-up on a fresh machine:
#   make demo   - install into .venv and run the embedded demo (no Redis needed)
#   make test   - install into .venv, start Redis/PostgreSQL if they are not running, run the tests
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/sessionsearch demo

test: $(STAMP)
	./scripts/services
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/bench_search.py

clean:
	rm -rf $(VENV) data .pytest_cache .hypothesis
