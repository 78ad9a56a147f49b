# Torchyard: `make run` starts the whole stack on embedded defaults; `make test` runs every test.
# Both install what they need first (a virtualenv from pyproject.toml and workers/pyproject.toml, the
# dashboard's npm packages).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.installed
NPM_STAMP := node_modules/.installed
DIST := frontend/dist/index.html
# The dashboard's API types, generated from the server's OpenAPI schema and committed.
API_TYPES := frontend/src/lib/api-schema.d.ts
SCHEMA_CMD := cd backend && DATABASE_URL=sqlite:///:memory: ../$(BIN)/python manage.py spectacular --validate --fail-on-warn --format openapi-json
# The CPU torch wheel lies here on the project's machines; pip would otherwise fetch a CUDA build.
WHEELS := $(wildcard /opt/wheels)
PIP_FIND := $(if $(WHEELS),--find-links $(WHEELS),)
FRONTEND_SRC := $(shell find frontend/src frontend/index.html frontend/vite.config.ts -type f 2>/dev/null)

# Tests run against the real servers of this machine (started below when they are down).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/torchyard
TEST_REDIS_URL ?= redis://127.0.0.1:6379/9

.PHONY: run test test-fast setup install frontend services lint lint-python lint-frontend pytest pytest-unit pytest-integration npm-test bench clean browser api-types docs

run: install frontend
	$(BIN)/torchyard-server run

install: $(PY_STAMP)

# Two distributions, both editable, in one pip command so the server's dependency on `torchyard` is
# met by ./workers (the agent, supervisor, SDK, CLI) and not looked up on an index. Neither names
# torch: TORCH is the training Python's torch for the local agents and the tests (the CPU wheel on
# disk; a looser pin would pull a multi-GB CUDA build). ./tests/plugins: the tests' own placement
# policy, found by its entry point as a site's would be. An existing .venv is upgraded in place.
# pip byte-compiles what it installs (40 s of CPU here): these machines set PYTHONDONTWRITEBYTECODE,
# so a module left uncompiled would be compiled again by every process that imports it.
TORCH ?= torch==2.13.0 numpy

$(PY_STAMP): pyproject.toml workers/pyproject.toml tests/plugins/pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is needed (found %s)" % sys.version.split()[0]'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@# Left by the one-distribution layout: it would shadow the new metadata when . is on sys.path.
	rm -rf torchyard.egg-info
	$(BIN)/pip install --quiet $(PIP_FIND) -e ./workers -e '.[dev]' -e ./tests/plugins $(TORCH)
	touch $@

$(NPM_STAMP): package.json package-lock.json frontend/package.json
	npm ci --no-audit --no-fund
	touch $@

frontend: $(DIST)

$(DIST): $(NPM_STAMP) $(FRONTEND_SRC)
	npm run build

# PostgreSQL and Redis are installed on the project's machines; start them when they are down.
services:
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@for i in $$(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
	@redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
	@for i in $$(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.5; done

# Debian's chromium for the browser tests (Playwright drives it; it never downloads a browser).
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

# lint's two halves are independent: `make -j2 lint` (as `make test` runs it) runs them side by side.
lint: lint-python lint-frontend

lint-frontend: $(NPM_STAMP)
	npm run lint

lint-python: install $(NPM_STAMP)
	$(BIN)/ruff check backend workers tests
	$(BIN)/mypy backend/torchyard_server workers/torchyard
	$(BIN)/lint-imports
	cd backend && DATABASE_URL=sqlite:///:memory: ../$(BIN)/python manage.py makemigrations --check --dry-run
	@# docker-compose.yml and the agent host's through `docker compose config`; the kustomize overlays
	@# built by kubectl and validated against the Kubernetes schemas (backend/deploy/check.py).
	$(BIN)/python backend/deploy/check.py
	@# The OpenAPI schema is valid OpenAPI (tests/api/test_schema_fuzz.py holds the API to it), and the
	@# dashboard's generated types are the ones it gives.
	@mkdir -p var
	$(SCHEMA_CMD) --file ../var/openapi.json
	npx openapi-typescript var/openapi.json --default-non-nullable false --output var/api-schema.d.ts >/dev/null
	@cmp -s var/api-schema.d.ts $(API_TYPES) || (echo "$(API_TYPES) is stale: run 'make api-types' and commit it" >&2; exit 1)
	@# The documentation site (mkdocs.yml): --strict fails on a broken link or anchor, and on a
	@# reference page (generated from the code by docs/hooks/reference.py) that cannot be built; its
	@# REST API page renders the schema just written and validated.
	TORCHYARD_DOCS_OPENAPI_FILE=var/openapi.json NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Everything the tests need: the virtualenv, the dashboard's build, PostgreSQL and Redis, Chromium.
setup: install frontend services browser

# pytest in two tiers, each its own run, the unit tier first so that a unit failure shows in minutes:
# - unit: every test outside tests/integration, on two pytest-xdist workers (each has its own test
#   database, named by pytest-django, and Redis database: xdist_redis.py). `--dist load`, not loadfile:
#   Schemathesis's cases share one node id, and xdist's file and scope schedulers keep one of them.
# - integration: whole stacks (tests/integration) on two workers too, a module at a time each
#   (`--dist loadfile`: a module's tests share its fixtures), the longest modules first (the order is
#   tests/integration/conftest.py's, hence --no-loadscope-reorder); each worker shares its own stacks
#   among its modules (tests/integration/shared.py). A whole-stack test waits more than it computes:
#   one at a time left half of the two cores idle (three slowed every test more than they overlapped).
TEST_ENV := DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL)
UNIT_TIER := --ignore=tests/integration -p tests.xdist_redis -n 2 --dist load
INTEGRATION_TIER := tests/integration -n 2 --dist loadfile --no-loadscope-reorder
pytest: pytest-unit pytest-integration

pytest-unit: setup
	@mkdir -p var
	$(TEST_ENV) TORCHYARD_TEST_TIER=unit $(BIN)/python -m pytest $(UNIT_TIER) --junitxml=var/junit-unit.xml $(PYTEST_ARGS)

pytest-integration: setup
	@mkdir -p var
	$(TEST_ENV) TORCHYARD_TEST_TIER=integration $(BIN)/python -m pytest $(INTEGRATION_TIER) --junitxml=var/junit-integration.xml $(PYTEST_ARGS)

# The documentation site on http://127.0.0.1:8001/ (mkdocs.yml; 8000 is `make run`'s), rebuilt on
# every change; `make lint` builds it with --strict into var/site.
docs: install $(NPM_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# Regenerates the dashboard's API types after a change to a serializer or view.
api-types: install $(NPM_STAMP)
	@mkdir -p var
	$(SCHEMA_CMD) --file ../var/openapi.json
	npx openapi-typescript var/openapi.json --default-non-nullable false --output $(API_TYPES)

npm-test: $(NPM_STAMP)
	npm test

# For work in progress: lint and the unit tier (no whole stack is started), a few minutes.
# `make test` stays the whole suite, and what CI runs.
test-fast: setup lint pytest-unit

# `make test`'s phases, each timed: it prints its seconds and appends them to $(PHASES), which the
# test ledger (tests/ledger.py) prints beside pytest's modules and stacks at the end of the run, and
# writes with them to var/test-ledger.json. Each phase runs its targets' independent parts side by
# side (-j, 2 unless given: pip's install beside npm's install, the dashboard's build and its tests;
# then lint's Python half and its TypeScript half beside the unit tier, which leaves half a core idle
# on average and prints its result after six minutes either way), each target's output kept together.
PHASES := var/test-phases.tsv
define timed
	@start=$$(date +%s.%N); $(MAKE) --no-print-directory -j$(or $(2),2) --output-sync=target $(1) || exit $$?; \
	seconds=$$(awk "BEGIN { printf \"%.1f\", $$(date +%s.%N) - $$start }"); \
	echo "== make test: $(1) took $$seconds s"; printf '%s\t%s\n' "$(1)" $$seconds >> $(PHASES)
endef

test:
	@mkdir -p var && rm -f $(PHASES) var/test-ledger.*.json
	$(call timed,setup npm-test)
	$(call timed,lint pytest-unit,3)
	@TORCHYARD_TEST_PHASES=$(PHASES) $(MAKE) --no-print-directory pytest-integration

# `make bench` runs every tests/benchmarks/bench_*.py, `make bench BENCH=checkpoint` only
# bench_checkpoint.py; each prints its own table, and any failing bench fails the target.
bench: install services
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(BIN)/python tests/benchmarks/run.py $(BENCH)

clean:
	rm -rf $(VENV) node_modules frontend/dist var
