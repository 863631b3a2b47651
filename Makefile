# cfjax developer commands. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

EXPERIMENTS_STAMP := $(VENV)/.installed-experiments
DEMO_STAMP := $(VENV)/.installed-demo
LINT_STAMP := $(VENV)/.installed-lint
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: install lint format docs quick test slow seeds bench demo experiments clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,bench]'
	touch $(BENCH_STAMP)

# The cli extra: what every subcommand of the cfjax command needs (figures, CSV and parquet).
$(DEMO_STAMP): $(PY) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e '.[cli]'
	touch $(DEMO_STAMP)

$(EXPERIMENTS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,bench,text]'
	touch $(EXPERIMENTS_STAMP)

$(DOCS_STAMP): $(PY) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e '.[docs]'
	touch $(DOCS_STAMP)

$(LINT_STAMP): $(PY) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e '.[lint,cli]'
	touch $(LINT_STAMP)

install: $(STAMP)

# Static checks: ruff's linter and formatter (check only) and mypy, on cfjax/.
lint: $(LINT_STAMP)
	$(PY) -m ruff check cfjax
	$(PY) -m ruff format --check cfjax
	$(PY) -m mypy

# The documentation site into docs/_build/html: the API reference from the docstrings, the user
# guide, the tutorials (executed), the command's reference; every warning an error.
docs: $(DOCS_STAMP)
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

# Rewrite cfjax/ in ruff's format and apply its safe fixes.
format: $(LINT_STAMP)
	$(PY) -m ruff check --fix cfjax
	$(PY) -m ruff format cfjax

# The quick tier, for iterating: unit tests only (no command runs, training or searches).
quick: $(STAMP)
	$(PY) -m pytest -m 'not slow and not heavy'

# Everything but the replication studies: what CI runs (tests/README.md lists the tiers).
test: $(STAMP)
	$(PY) -m pytest

# The replication studies (e.g. bootstrap intervals' coverage over 100 simulated data sets, a
# default fit or search against a 10x longer one).
slow: $(STAMP)
	$(PY) -m pytest -m slow

# The randomized tests under many seeds (SEEDS=50 by default; CFJAX_TEST_SEED sets the first).
SEEDS ?= 50
seeds: $(STAMP)
	$(PY) -m pytest tests --seeds $(SEEDS)

bench: $(BENCH_STAMP)
	$(PY) -m experiments.benchmarks.run_all
	$(PY) -m experiments.benchmarks.render

# The three pillars on built-in synthetic data: results/demo/report.md (a rerun reuses the
# trained checkpoints). Then whether the run reproduces the README's numbers (a difference is
# reported, not an error); `$(PY) -m experiments.demo_readme results/demo` writes a fresh run's
# numbers and times into docs/demo_results.json and the README.
demo: $(DEMO_STAMP)
	$(VENV)/bin/cfjax demo --force --out results/demo
	-$(PY) -m experiments.demo_readme --check results/demo

experiments: $(EXPERIMENTS_STAMP)
	$(PY) -m experiments.sensitivity
	$(PY) -m experiments.sensitivity_review
	$(PY) -m experiments.representations
	$(PY) -m experiments.marginalisation --quick --learned
	$(PY) -m experiments.generator --quick --out experiments/reports/generator

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
