PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

MIN_VENV := .venv-min
MIN_STAMP := $(MIN_VENV)/.installed
# What check-min runs on the lowest supported versions: a lifecycle through every layer.
MIN_TESTS := tests/engine/test_submit.py tests/engine/test_claim.py tests/engine/test_sweep.py \
	tests/engine/test_fakeserver.py tests/worker/test_happy_path.py tests/worker/test_kill.py \
	tests/worker/test_redis_outage.py tests/worker/test_cut_off.py tests/worker/test_redis_restart.py \
	tests/worker/test_plain_rq.py tests/worker/test_lean_rq.py tests/worker/test_outage_registration.py \
	tests/web/test_api.py tests/web/test_sse.py tests/cli/test_submit.py tests/test_demo.py

.PHONY: test lint fmt demo bench chaos chaos-cluster check-min check-valkey clean

$(STAMP): requirements.txt requirements-test.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt -r requirements-test.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

# The static checks (lint), the whole suite on the pinned versions, then the lowest supported ones
# (check-min). The suite runs on one process per core (at most 4): most of its time is waiting on
# leases, outages and failovers, not CPU; each process's servers take ports of its own range
# (tests/support/redis_server.py free_port). PARALLEL=-n0 runs it in this process alone.
PARALLEL ?= -n auto --maxprocesses 4
test: lint
	$(BIN)/python -m pytest $(PARALLEL) $(PYTEST_ARGS)
	$(MAKE) --no-print-directory check-min
	$(MAKE) --no-print-directory check-valkey

# The contract tests (tests/engine) again on Valkey 8, a server of the Redis 7.2 line
# (docker-compose.yml runs redis:7.2; Debian 12's redis-server is 7.0), which differs in what the
# engine relies on: its WAIT counts only a connection's own writes (lua/lib/record.lua replay).
# .ci/valkey fetches it from Debian into .cache/valkey; without it the run is skipped, loudly, and
# fails under REQUIRE_REAL_REDIS=1 (CI).
check-valkey: $(STAMP)
	@server=$$(.ci/valkey) || { \
	  if [ "$$REQUIRE_REAL_REDIS" = 1 ]; then echo "check-valkey: no Valkey server (.ci/valkey)" >&2; exit 1; fi; \
	  echo "check-valkey: SKIPPED: no Valkey server (.ci/valkey); the contract tests ran on redis-server only" >&2; \
	  exit 0; }; \
	GHOSTLESS_TEST_REDIS_SERVER=$$server $(BIN)/python -m pytest -q -p no:cacheprovider $(PARALLEL) tests/engine

# The layer contracts ([tool.importlinter]), ruff's lint and format ([tool.ruff]), mypy over the core
# ([tool.mypy]); all configured in pyproject.toml, a few seconds in all.
lint: $(STAMP)
	LINT_IMPORTS=$(BIN)/lint-imports .ci/lint-imports
	$(BIN)/ruff check .
	MYPY=$(BIN)/mypy .ci/mypy
	$(BIN)/ruff format --check --output-format concise .

# Rewrite the code in the house style: ruff format, then the lint fixes ruff makes safely (imports
# sorted, ...); what it cannot fix it lists.
fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

$(MIN_STAMP): requirements-min.txt requirements-test.txt pyproject.toml
	test -x $(MIN_VENV)/bin/python || $(PY) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/pip install -q --upgrade pip
	$(MIN_VENV)/bin/pip install -q -r requirements-min.txt -r requirements-test.txt
	$(MIN_VENV)/bin/pip install -q --no-deps -e .
	touch $(MIN_STAMP)

# pyproject.toml's lower bounds hold: the core tests pass on exactly those versions.
check-min: $(MIN_STAMP)
	$(MIN_VENV)/bin/python -m pytest -q -p no:cacheprovider $(PARALLEL) $(MIN_TESTS)

demo: $(STAMP)
	$(BIN)/python -m ghostless.demo $(ARGS)

# Every benchmark, each beside its baseline, written to docs/benchmarks.md (several minutes; installs the
# pyproject [bench] extras: flask-sse for bench/sse.py; gevent is a runtime dependency).
# One of them: make bench ARGS=core.py
bench: $(STAMP)
	$(BIN)/pip install -q $$($(BIN)/python -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['bench']))")
	$(BIN)/python bench/run_all.py $(ARGS)

# The chaos soak at full size (tests/chaos/test_soak.py runs 500 tasks in `make test`).
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos.soak --tasks 10000

# The chaos soak through failovers (tests/chaos/test_failover.py runs a short one of each in `make test`):
# on a Redis Cluster (3 masters + 3 replicas, a master SIGKILLed at 25/50/75 % of the tasks, one shard
# after another) and through Sentinel (the primary SIGKILLed), each without and with wait_replicas=1,
# the replica cut off CHAOS_LAG seconds before each kill. Prints what each run lost (about 20 min;
# docs/operations.md, "Failover: what can be lost").
CHAOS_FAILOVER_TASKS ?= 2000
CHAOS_LAG ?= 0.5
chaos-cluster: $(STAMP)
	@status=0; for backend in cluster sentinel; do for wait in 0 1; do \
	  echo "== $$backend, wait_replicas=$$wait, replica cut off $(CHAOS_LAG) s before each failover"; \
	  $(BIN)/python -m tests.chaos.soak --backend $$backend --wait-replicas $$wait --lag $(CHAOS_LAG) \
	    --tasks $(CHAOS_FAILOVER_TASKS) --restart-at 0.25,0.5,0.75 --drain-timeout 600 || status=1; \
	done; done; exit $$status

clean:
	rm -rf $(VENV) $(MIN_VENV) .pytest_cache
