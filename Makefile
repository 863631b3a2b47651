# cfjax developer commands. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: install test bench demo clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,bench]'
	touch $(BENCH_STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

bench: $(BENCH_STAMP)
	$(PY) -m experiments.benchmarks.run_all

demo: $(STAMP)
	$(PY) -m experiments.demo

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
