# The README's two commands. Each does all of its own set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-fast lint wheel-check check-java clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Runtime install (the package, its console script, and the Spark and sim (plots) extras the demo uses).
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[spark,sim]'
	touch $@

# Everything the tests need: pytest, hypothesis, ruff, pyspark.
$(VENV)/.installed-dev: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed

# The demo removes its temporary directory at the end; `make demo KEEP=1` keeps it and prints its path.
demo: check-java $(VENV)/.installed
	$(PY) -m tools.demo $(if $(KEEP),--keep)

test: check-java $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(PY) ci/wheel_check.py
	$(PY) -m pytest

# A contributor's quick run: ruff and the tests not marked spark or slow, each property test bounded to
# 10 examples (tests/conftest.py says which tests are slow and how). No Java needed. `make test` is the
# whole suite, and what must pass.
test-fast: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	LSM_TEST_FAST=1 $(PY) -m pytest -m "not spark and not slow"

# The wheel as a user gets it: built from a copy of the tree, installed into a fresh virtualenv (its own
# dependencies, no source tree on the path), then imported and driven through `lsm` (~15 s with pip's
# cache). The editable install above would hide a module the wheel leaves out. --keep: ci/wheel_check.py.
wheel-check: $(VENV)/.installed
	$(PY) ci/wheel_check.py

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .

# pyspark 4 needs Java 17 or newer; say so plainly instead of skipping the Spark tests.
check-java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "error: 'java' not found. Java 17+ is required for the Spark parts (pyspark 4)." >&2; \
	  echo "       Install it, e.g. 'apt-get install openjdk-17-jre-headless', then run make again." >&2; \
	  exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	 if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "error: Java 17+ is required for pyspark 4; found version '$$v'." >&2; exit 1; fi

clean:
	rm -rf $(VENV) build *.egg-info
