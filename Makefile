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
# The suite spread over every core; worksteal hands a long test's neighbours to an idle worker.
XDIST ?= -n auto --dist worksteal
# The documentation site (docs/conf.py): any warning fails it (-W, after reporting them all),
# and so does any reference that does not resolve (-n): a broken link, a missing image, an
# unknown name in the API reference.
DOCS ?= docs
SPHINXOPTS ?= -W --keep-going -n
PORT ?= 8000

.PHONY: install train test test-fast coverage bench docs docs-serve clean

$(BIN)/.xfmr-installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.xfmr-installed

train: install
	$(BIN)/xfmr-train $(ARGS)

test: install
	$(BIN)/pytest -q $(XDIST) $(PYTEST_ARGS)

# The loop while editing: no end-to-end runs of the CLI or sweeps (`-m "not slow"`).
test-fast: install
	$(BIN)/pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

# Line coverage of src/, child processes included (pyproject's [tool.coverage]); the data file
# by absolute path, so a CLI run in another directory adds to it. A failing test still gets
# its figure, and the target still fails.
coverage: install
	rm -f .coverage .coverage.*
	COVERAGE_FILE=$(CURDIR)/.coverage $(BIN)/coverage run -m pytest -q $(XDIST) $(PYTEST_ARGS); \
	status=$$?; $(BIN)/coverage combine -q && $(BIN)/coverage report --format=total \
	&& $(BIN)/coverage report -m > coverage.txt; exit $$status

bench: install
	$(BIN)/python benchmarks/nanogpt_shakespeare.py --data $(or $(DATA),../shared/data/tinyshakespeare/input.txt) $(ARGS)

# The site in $(DOCS)/_build/html (open index.html). Every page read afresh (-E): Sphinx warns
# of a page's faults only when it reads the page, so a second build would pass a broken link
# in a page that did not change.
docs: install
	$(BIN)/sphinx-build $(SPHINXOPTS) -E -b html $(DOCS) $(DOCS)/_build/html

# The site on http://127.0.0.1:$(PORT) (PORT=0: a free port, printed), rebuilt and reloaded in
# the browser as a page or a docstring in src/ changes.
docs-serve: install
	$(BIN)/sphinx-autobuild $(SPHINXOPTS) --host 127.0.0.1 --port $(PORT) --watch src \
		$(DOCS) $(DOCS)/_build/html

clean:
	rm -rf $(VENV) .cache .pytest_cache .coverage .coverage.* coverage.txt $(DOCS)/_build
