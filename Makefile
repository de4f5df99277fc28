PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo bench chaos clean

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/python -m engine.demo $(ARGS)

# Every benchmark, each beside its baseline, written to docs/benchmarks.md (several minutes; installs the
# pyproject [bench] extras: flask-sse and gevent for bench/sse.py).
# One of them: make bench ARGS=core.py
bench: $(STAMP)
	$(BIN)/pip install -q $$($(BIN)/python -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['bench']))")
	$(BIN)/python bench/run_all.py $(ARGS)

# The chaos soak at full size (tests/chaos/test_soak.py runs 500 tasks in `make test`).
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos.soak --tasks 10000

clean:
	rm -rf $(VENV) .pytest_cache
