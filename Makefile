# The two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all test-slow clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# The offline demo: train on the generated language pair, evaluate, translate
# examples (see runs/demo/metrics.json). Export joins once the SavedModel lands.
demo: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m training.train --config demo --workdir runs/demo

# Default suite: tiny models, seconds per test (CI runs this).
test: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m pytest -m "not slow" -q

# Slow or data-heavy checks (real corpora in ../shared/corpora), opt-in.
test-slow: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m pytest -m slow -q

test-all: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
