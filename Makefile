# The two commands a newcomer needs: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 60
# GNU OpenMP spin-waits by default: with torch on 2 threads on a busy 2-core box that is 10x slower
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: demo test lint format bench mutate stop clean chromium server-pg

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Python writes each module's .pyc when it first imports it (some machines set
# PYTHONDONTWRITEBYTECODE=1, and then every process compiles all it imports, each time): so the
# install compiles nothing (pip's one-file-at-a-time compile of every installed module is about
# 80 s here) and each module the demo or the tests import is compiled once, by its first import
unexport PYTHONDONTWRITEBYTECODE

# reinstall only when pyproject.toml changes; the demo zoo has an lm-eval entry (the lmeval extra)
$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PIP) install --no-compile -e '.[lmeval]' 2> >(grep -v 'is ignored: it is neither' >&2)
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(VENV)/bin/python
	$(PIP) install --no-compile -e '.[dev]' 2> >(grep -v 'is ignored: it is neither' >&2)
	touch $(VENV)/.installed $@

demo: $(VENV)/.installed
	$(VENV)/bin/tinyllm demo

# tests/test_dashboard_browser.py drives Debian's chromium: installed here when missing and we are
# root (CI is root on a fresh machine); without it (and without root) those tests are skipped
chromium:
	@command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || { \
	  if [ "$$(id -u)" = 0 ]; then echo "installing Debian's chromium for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: no chromium and not root: the browser tests will be skipped" \
	    "(sudo apt-get install chromium)"; fi; }

# lint-imports: the layer contracts of pyproject.toml (docs/architecture.md); --no-cache: a cache
# keyed on file times can miss an edit made within the same second
test: $(VENV)/.installed-dev chromium
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

format: $(VENV)/.installed-dev
	$(VENV)/bin/ruff format .

bench: $(VENV)/.installed-dev
	$(PY) bench/bench_ppl.py
	$(PY) bench/bench_dashboard.py

# mutation testing of the core with mutmut (docs/mutation.md); one file: make mutate MODULE='tinyllm/stats/*.py'
# (never part of make test; installs the `mutation` extra)
mutate: $(VENV)/.installed-dev
	$(PIP) install -e '.[mutation]' 2> >(grep -v 'is ignored: it is neither' >&2)
	nice $(PY) tools/mutate.py $(if $(MODULE),--module '$(MODULE)')

# stop the Prefect server that `make demo` (or `make server-pg`) started, then its PostgreSQL;
# `tinyllm server stop` signals the pid in server.pid only when it is that server (server.json)
stop:
	@if [ -x $(VENV)/bin/tinyllm ]; then $(VENV)/bin/tinyllm server stop; \
	else echo "no $(VENV)/bin/tinyllm: no server of this checkout was started (make demo)"; fi

# a Prefect server on PostgreSQL (a cluster under .prefect/pg), for many workers and Dask runs;
# PostgreSQL keeps the port of its last start when free (PG_PORT=5433: that port)
server-pg: $(VENV)/.installed
	$(VENV)/bin/tinyllm server start --db postgres $(if $(PG_PORT),--pg-port $(PG_PORT))

clean:
	rm -rf $(VENV) .prefect .pytest_cache
