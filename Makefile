# The two commands a user needs: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
GATEWAY_CONFIG ?= config.yaml
export HOST PORT GATEWAY_CONFIG
# Offline by design: no model hub, no remote LiteLLM price map.
export HF_HUB_OFFLINE := 1
export LITELLM_LOCAL_MODEL_COST_MAP := True
export TOKENIZERS_PARALLELISM := false

.PHONY: run test lint setup install migrate ingest lock bench clean

INGEST = $(BIN)/python -m gateway ingest --config "$(GATEWAY_CONFIG)"

# The note is a variable: make echoes the recipe, and its words there read as a failure on every run. Exit 1
# is also a folder another process holds, or a running server that refused a changed config: not a source.
export RUN_NOTE := make run: `gateway ingest` ended with errors (above); starting the server anyway, which retries a failed source on its schedule

# A source that fails to ingest, in whole or in part (exit 1), is recorded, and retried on its schedule by the server, so the
# server still starts; a config error (exit 2) stops here. The demo operator's token is for this local
# run only (config.yaml reads it from the environment). `exec`: Ctrl-C reaches the shell too, and a shell
# left around `serve` died of it, so make printed "Interrupt" after serve's own clean stop (exit 0).
run: setup
	$(INGEST) || { test $$? -eq 1 && echo "$$RUN_NOTE" >&2; }
	OPERATOR_TOKEN="$${OPERATOR_TOKEN:-dev-operator-token}" exec $(BIN)/python -m gateway serve --config "$(GATEWAY_CONFIG)" --host "$(HOST)" --port "$(PORT)"

# Three workers on two cores (many tests wait on servers and subprocesses: 7m22 against 10m58 with two,
# measured side by side with other work running), a test file per worker at a time (module-scoped servers start once);
# then, alone, the tests that disturb a shared service. Exit code 5: PYTEST_ARGS selected none of a step's
# tests. (A `-m` in PYTEST_ARGS would replace the steps' own; select by path or `-k` instead.)
TEST_WORKERS ?= 3
test: setup lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not exclusive" $(PYTEST_ARGS) || test $$? -eq 5
	$(BIN)/python -m pytest -q -m exclusive $(PYTEST_ARGS) || test $$? -eq 5

lint: install
	$(BIN)/ruff check .

setup: install migrate

install: $(VENV)/.installed

# Reinstall only when the lock changes. --require-hashes: every artifact is checked against the lock.
# Python 3.11+ is checked first (and that PYTHON is there at all, and runs: the shell's "not found", or a pyenv shim's
# lines for a version not selected, read as its version): an older one failed in pip ("No matching distribution found for
# annotated-doc==0.0.7"), and the venv it left was kept by every later run, whatever PYTHON said. pip is
# quiet (its output is pages of lines), so a note says first what the minutes of silence are.
PY311 = import sys; sys.exit(sys.version_info < (3, 11))
$(VENV)/.installed: requirements-dev.lock pyproject.toml
	@if test -x $(BIN)/python; then $(BIN)/python -c '$(PY311)' || { echo "make: $(VENV) was made with $$($(BIN)/python -V 2>&1), and the gateway needs Python 3.11 or newer: remove it (rm -rf $(VENV)) and run make again with PYTHON=python3.11 (or newer)" >&2; exit 1; }; \
	else command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) was not found: install Python 3.11 or newer, or run make with PYTHON=python3.11 (or another interpreter of 3.11 or newer on your PATH)" >&2; exit 1; }; \
	rc=0; $(PYTHON) -c '$(PY311)' 2>/dev/null || rc=$$?; \
	if test $$rc -eq 1; then echo "make: $(PYTHON) is $$($(PYTHON) -V 2>&1), and the gateway needs Python 3.11 or newer: run make with PYTHON=python3.11 (or newer)" >&2; exit 1; \
	elif test $$rc -ne 0; then echo "make: $(PYTHON) did not run (exit $$rc: $$($(PYTHON) -V 2>&1 | head -n 1)): install Python 3.11 or newer, or run make with PYTHON=python3.11 (or another interpreter of 3.11 or newer on your PATH)" >&2; exit 1; fi; fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "make: installing the pinned dependencies into $(VENV) (about 1 GB; a few minutes the first time, with no output until it is done)"
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r requirements-dev.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

migrate: install
	$(BIN)/python -m gateway db upgrade --config "$(GATEWAY_CONFIG)"

ingest: install
	$(INGEST)

# Regenerate the hash-pinned locks from requirements*.in (needs `uv` on PATH).
lock:
	uv pip compile --generate-hashes --python-version 3.11 requirements.in -o requirements.lock
	uv pip compile --generate-hashes --python-version 3.11 requirements-dev.in -o requirements-dev.lock

bench: setup
	$(BIN)/python -m bench.retrieval $(BENCH_ARGS)

# The SQLite journal files go with the database: a new one beside an old -wal may have it replayed into it.
clean:
	rm -rf $(VENV) var/*.db var/*.db-wal var/*.db-shm var/qdrant var/qdrant.admin.*
