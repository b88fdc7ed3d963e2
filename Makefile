# The README's commands. `make test` is what CI runs (see .ci/run).
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache
export PYTHONHASHSEED ?= 0
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install test bench train clean

install: $(STAMP)

# Re-runs only when setup.py changes; a no-op otherwise.
$(STAMP): setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

test: install
	@mkdir -p $(NUMBA_CACHE_DIR)
	$(PY) -m pytest -q tests

train: install
	@mkdir -p $(NUMBA_CACHE_DIR)
	$(PY) -m muzero.learner --env=cartpole $(ARGS)

bench: install
	@mkdir -p $(NUMBA_CACHE_DIR)
	@for b in bench/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(NUMBA_CACHE_DIR) .pytest_cache
