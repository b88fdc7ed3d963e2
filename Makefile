# The README's commands. `make test` is what CI runs (see .ci/run).
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache
export PYTHONHASHSEED ?= 0
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install test bench bench-guard train clean

install: $(STAMP)

# Re-runs only when setup.py changes; a no-op otherwise.
$(STAMP): setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# `python -m muzero.warmup` compiles the Numba kernels into $(NUMBA_CACHE_DIR) on all cores
# (35-40 s on 2 cores the first time, about a second once cached), so that tests and
# actor processes load them instead of each compiling its own.
test: install
	@mkdir -p $(NUMBA_CACHE_DIR)
	$(PY) -m muzero.warmup
	$(PY) -m pytest -q tests

train: install
	@mkdir -p $(NUMBA_CACHE_DIR)
	$(PY) -m muzero.warmup
	$(PY) -m muzero.learner --env=cartpole $(ARGS)

bench: install
	@mkdir -p $(NUMBA_CACHE_DIR)
	$(PY) -m muzero.warmup
	@for b in bench/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# The short speed benchmarks and one CartPole run against a baseline commit, side by side
# (bench/guard.py): `make bench-guard BASELINE=<rev>`; ARGS='--only=search,serving' for a subset.
bench-guard: install
	@test -n "$(BASELINE)" || { echo "error: name the commit to compare against: make bench-guard BASELINE=<rev>"; exit 2; }
	$(PY) bench/guard.py --baseline=$(BASELINE) $(ARGS)

clean:
	rm -rf $(VENV) $(NUMBA_CACHE_DIR) .pytest_cache
