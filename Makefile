# hooksvc: `make run` serves, `make test` runs the whole suite. Both set everything up.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements/*.txt | cksum | cut -d' ' -f1)

.PHONY: run test lint typecheck pytest services bench chromium clean soak

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

pytest: $(STAMP) services chromium
	$(PY) -m pytest $(PYTEST_ARGS)

# The opt-in soak: a fleet of 200 clusters through its lifecycle under random faults.
soak: $(STAMP) services
	HOOKSVC_SOAK=1 $(PY) -m pytest tests/soak -s $(PYTEST_ARGS)

# Makes sure PostgreSQL and Redis answer (starting throwaway ones if needed).
services:
	@scripts/ensure-services

# The benchmarks (bench/run.py): their own database and Redis DB 12; writes docs/benchmarks.md.
# BENCH_ARGS=--quick for a smoke run, BENCH_FULL=1 for the issue's full durations.
bench: $(STAMP) services
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
	$(PY) -m bench.run $(BENCH_ARGS)

# The browser test drives Debian's Chromium (Playwright's own browser downloads cannot
# be reached): install it when missing and we may; otherwise say so, and the test skips.
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
			|| echo "Could not install chromium; the browser test will be skipped."; \
		else \
			echo "The browser test needs /usr/bin/chromium (apt-get install --no-install-recommends chromium); it will be skipped."; \
		fi; \
	fi

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache
