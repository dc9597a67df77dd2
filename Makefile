# `make train` and `make test` create (or reuse) .venv and install xfmr into it first.
VENV ?= .venv
PYTHON ?= python3
# The CPU build of torch; a GPU user sets TORCH_SPEC='torch==2.13.0' with their own index, or any build.
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
ARGS ?=
PYTEST_ARGS ?=

.PHONY: install train test test-fast bench clean

$(BIN)/.xfmr-installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.xfmr-installed

train: install
	$(BIN)/xfmr-train $(ARGS)

test: install
	$(BIN)/pytest -q $(PYTEST_ARGS)

test-fast: install
	$(BIN)/pytest -q -m "not slow" $(PYTEST_ARGS)

bench: install
	$(BIN)/python benchmarks/nanogpt_shakespeare.py --data $(or $(DATA),../shared/data/tinyshakespeare/input.txt) $(ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache
