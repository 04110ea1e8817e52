# Two commands do all the set-up on a fresh machine:
#   make demo   - install into .venv and run the embedded demo (no Redis needed)
#   make test   - install into .venv, start Redis/PostgreSQL if they are not running, run the tests
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench figures screenshots install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# the Control UI tests drive Debian's chromium through Playwright (never `playwright install`)
install: $(STAMP)
	./scripts/chromium

demo: $(STAMP)
	$(BIN)/sessionsearch demo

test: install
	./scripts/services
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/bench_search.py

clean:
	rm -rf $(VENV) data .pytest_cache .hypothesis

# the figures the fault and fuzz tests measure, kept in bench/results/*.json
figures: $(STAMP)
	./scripts/services
	SESSIONSEARCH_SAVE_FIGURES=1 $(BIN)/python -m pytest -q -s tests/test_faults.py tests/test_broker_faults.py tests/test_fuzz.py

# the Control UI screenshots docs/ui.md shows, taken by its browser tests
screenshots: install
	SESSIONSEARCH_SAVE_SCREENSHOTS=1 $(BIN)/python -m pytest -q tests/test_ui.py
