# Two commands do all the set-up on a fresh machine:
#   make demo   - install into .venv and run the embedded demo (no Redis needed)
#   make test   - install into .venv, start Redis/PostgreSQL if they are not running, run the tests
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the official MCP Inspector CLI, which tests/test_mcp_inspector.py runs (npm writes the inner lock file)
NODE_STAMP := tests/node/node_modules/.package-lock.json

.PHONY: demo test bench figures install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(NODE_STAMP): tests/node/package.json tests/node/package-lock.json
	cd tests/node && npm ci --no-audit --no-fund --loglevel=error

install: $(STAMP) $(NODE_STAMP)

demo: $(STAMP)
	$(BIN)/sessionsearch demo

test: $(STAMP) $(NODE_STAMP)
	./scripts/services
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/bench_search.py

clean:
	rm -rf $(VENV) data .pytest_cache .hypothesis tests/node/node_modules

# the figures the fault and fuzz tests measure, kept in bench/results/*.json
figures: $(STAMP)
	./scripts/services
	SESSIONSEARCH_SAVE_FIGURES=1 $(BIN)/python -m pytest -q -s tests/test_faults.py tests/test_broker_faults.py tests/test_fuzz.py
