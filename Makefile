# hooksvc: `make run` serves, `make test` runs the whole suite. Both set everything up.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements/*.txt | cksum | cut -d' ' -f1)

.PHONY: run test lint typecheck pytest services clean

$(STAMP): requirements/base.txt requirements/dev.txt requirements/prod.txt requirements/constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements/dev.txt
	@rm -f $(VENV)/.installed-*; touch $@

run: $(STAMP)
	$(PY) -m hooksvc.devserver

test: $(STAMP) lint typecheck pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/bandit -r hooksvc workflows -q

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP) services
	$(PY) -m pytest $(PYTEST_ARGS)

# Makes sure PostgreSQL and Redis answer (starting throwaway ones if needed).
services:
	@scripts/ensure-services

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache
