# hooksvc: `make run` serves, `make test` runs the whole suite. Both set everything up.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
REQUIREMENTS_SUM := $(shell cat requirements/*.txt | cksum | cut -d' ' -f1)
# Two installs, each redone when requirements/ changes: what `make run` needs
# (requirements/run.txt), and the test tools on top of it (dev.txt) for everything else.
RUN_STAMP := $(VENV)/.installed-run-$(REQUIREMENTS_SUM)
STAMP := $(VENV)/.installed-dev-$(REQUIREMENTS_SUM)

.PHONY: run run-signin test lint typecheck pytest docs services bench bench-fleet-10000 bench-saturation chromium podman image clean soak soak-run crds clusterctl openapi version release release-record

$(RUN_STAMP): requirements/base.txt requirements/run.txt requirements/constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements/run.txt
	@rm -f $(VENV)/.installed-run-*; touch $@

$(STAMP): requirements/base.txt requirements/run.txt requirements/dev.txt requirements/prod.txt requirements/constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements/dev.txt
	@rm -f $(VENV)/.installed-dev-* $(VENV)/.installed-run-*; touch $@ $(RUN_STAMP)

# Serves on https://localhost:9443 with its own PostgreSQL under var/ (no DATABASE_URL set).
run: $(RUN_STAMP)
	$(PY) -m hooksvc.serving.devserver

# `make run` with a local OpenID Connect provider and sample people, to try sign-in and roles
# (docs/make-run.md; hooksvc/serving/devsignin.py). The provider is a development requirement.
run-signin: $(STAMP)
	HOOKSVC_DEV_SIGNIN=1 $(PY) -m hooksvc.serving.devserver

# lint and typecheck run beside pytest, their output after its: on a clean clone they take
# a minute or more (mypy's cache is cold) that the tests, which mostly wait on the servers and
# workers they start, share the cores with instead of waiting for. Any failure fails `make test`.
test: $(STAMP) services
	@mkdir -p var; status=0; \
	$(MAKE) --no-print-directory -k lint typecheck >var/checks.log 2>&1 & checks=$$!; \
	$(MAKE) --no-print-directory pytest || status=$$?; \
	wait $$checks || status=$$((status ? status : 2)); \
	echo "--- make lint typecheck (beside pytest):"; cat var/checks.log; exit $$status

# The migration check (scripts/check_migrations.py: every migration since the previous
# release, judged by django-migration-linter) reads PostgreSQL, hence `services`.
lint: $(STAMP) services
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/bandit -r hooksvc workflows -q
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) scripts/check-module-size
	$(PY) scripts/check_migrations.py

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The whole suite in PYTEST_WORKERS processes (pytest-xdist): each has its own PostgreSQL
# database (pytest-django's _gwN suffix), Redis database (HOOKSVC_TEST_REDIS_URL's number + N)
# and var/test/gwN (tests/settings.py). A file's tests share one process (--dist loadfile:
# a module's image, server or database is made once; pytest-xdist 3.8's loadgroup groups
# nothing under pytest 9.2, pytest-xdist issue 1386). Temporary files go to var/pytest, not
# the /tmp/pytest-of-$USER other sessions share and prune. `pytest FILE` alone stays serial.
# PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 3
PYTEST_ARGS ?=
pytest: $(STAMP) services chromium podman
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --basetemp=$(CURDIR)/var/pytest $(PYTEST_ARGS)

# The documentation site (mkdocs.yml: README.md is its home page, the rest docs/) into site/;
# `make test` builds it with --strict (tests/test_docs.py), where a broken link fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build

# The container image (IMAGE=hooksvc:local), with docker when its daemon answers, else
# podman; PYTHON_IMAGE picks the base (scripts/build-image).
IMAGE ?= hooksvc:local
image:
	scripts/build-image $(IMAGE)

# The opt-in soak: a fleet of 200 clusters through its lifecycle under random faults.
soak: $(STAMP) services
	HOOKSVC_SOAK=1 $(PY) -m pytest tests/soak -s $(PYTEST_ARGS)

# The opt-in soak of `make run` itself (tests/soak/make_run_soak.py): its stack, default broker,
# under fleets of 120 clusters for 30 minutes (SOAK_RUN_MINUTES, SOAK_RUN_CLUSTERS); reports
# crashes, restarts and errors, and writes docs/soak-run.md (SOAK_RUN_OUTPUT; empty: none).
SOAK_RUN_OUTPUT ?= docs/soak-run.md
soak-run: $(STAMP)
	SOAK_RUN_OUTPUT=$(SOAK_RUN_OUTPUT) $(PY) -m tests.soak.make_run_soak

# Regenerates k8s/base/crds from the definitions and the built-in step types (a test compares),
# and clusterctl/, whose components carry them.
crds: $(STAMP)
	HOOKSVC_STEP_MODULES= $(PY) manage.py crds --write k8s/base/crds
	$(PY) scripts/clusterctl-files --write clusterctl

# Regenerates clusterctl/ (metadata.yaml, runtime-extension-components.yaml) from the Helm
# chart charts/hooksvc (a test compares); `make crds` runs it too.
clusterctl: $(STAMP)
	$(PY) scripts/clusterctl-files --write clusterctl

# Regenerates docs/api-openapi.json, the REST API's OpenAPI document, from the code
# (drf-spectacular; a warning fails it). tests/api/test_openapi.py compares it with what the
# server serves.
openapi: $(STAMP)
	$(PY) manage.py spectacular --format openapi-json --validate --fail-on-warn \
		--file docs/api-openapi.json

# hooksvc's version (hooksvc/__init__.py, the one place it is written).
version:
	@$(PYTHON) scripts/release.py version

# A release (docs/releasing.md): `make release VERSION=x.y.z` sets the version everywhere and
# makes CHANGELOG.md's "Unreleased" its section; commit that, then `make release-record`
# adds the release commit to releases.json (commit that too).
release:
	@test -n "$(VERSION)" || { echo "make release VERSION=x.y.z" >&2; exit 2; }
	@$(MAKE) -s $(STAMP)
	$(PY) scripts/release.py prepare $(VERSION)

release-record:
	$(PYTHON) scripts/release.py record

# Makes sure PostgreSQL and Redis answer (starting throwaway ones if needed).
services:
	@scripts/ensure-services

# The benchmarks (bench/run.py): their own database and Redis DB 12; writes docs/benchmarks.md.
# BENCH_ARGS=--quick for a smoke run, BENCH_FULL=1 for the issue's full durations.
bench: $(STAMP) services
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
	$(PY) -m bench.run $(BENCH_ARGS)

# Issue 16's 10,000-cluster fleet, computed retryAfterSeconds only, at the fleet's default
# arrival rate (BENCH_FLEET_ARRIVALS; about 45 minutes); writes docs/fleet-10000.md.
bench-fleet-10000: $(STAMP) services
	BENCH_FULL=1 BENCH_FLEET_PARTS=lifecycle BENCH_FLEET_MODES=computed \
		$(PY) -m bench.run --only fleet --output docs/fleet-10000.md

# Issue 30: fixed against computed retryAfterSeconds on a saturated box, passes alternated in
# one run (BENCH_SAT_CLUSTERS, BENCH_SAT_ARRIVALS, BENCH_SAT_PAIRS; 47 minutes on a loaded box).
bench-saturation: $(STAMP) services
	$(PY) -m bench.fleet_saturation

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

# The image tests build and run the image with podman (there is no Docker engine here): install
# it, runc and debootstrap (the stand-in base image) when missing and we may; otherwise say so,
# and those tests skip. shared/notes/containers.md says what works.
podman:
	@if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman buildah runc debootstrap uidmap slirp4netns fuse-overlayfs >/dev/null \
			|| echo "Could not install podman; the image tests will be skipped."; \
		else \
			echo "The image tests need podman, runc and debootstrap (apt-get install podman buildah runc debootstrap); they will be skipped."; \
		fi; \
	fi

# As root, `make run` may have put its PostgreSQL outside var/ (hooksvc/devdb.py, ROOT_HOMES).
clean:
	@if [ -L var/postgres ]; then rm -rf "$$(readlink -f var/postgres)"; fi
	rm -rf $(VENV) var site .mypy_cache .ruff_cache .pytest_cache
