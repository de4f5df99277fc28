PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo bench bench-rq chaos clean

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/python -m engine.demo $(ARGS)

bench: $(STAMP)
	$(BIN)/python bench/core.py
	$(BIN)/python bench/sweep.py

# Recovery latency and throughput against plain RQ (real workers; minutes).
bench-rq: $(STAMP)
	$(BIN)/python bench/recovery.py
	$(BIN)/python bench/throughput.py

# The chaos soak at full size (tests/chaos/test_soak.py runs 500 tasks in `make test`).
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos.soak --tasks 10000

clean:
	rm -rf $(VENV) .pytest_cache
