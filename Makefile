# `make train` and `make test` create (or reuse) .venv and install xfmr into it first.
VENV ?= .venv
PYTHON ?= python3
# torch first, pinned, so no other package pulls in another version; the build is the package
# index's (PyPI: CUDA on Linux). CPU only: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
# with TORCH_SPEC=torch==2.13.0+cpu.
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
