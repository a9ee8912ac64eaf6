# miaflow: two commands. `make run` sets up and runs the embedded default; `make test` sets up and tests.
PYTHON ?= python3.11
VENV   ?= .venv
DEVICE ?= cpu
# Run inside the virtual environment, so that dvc calls this snakemake and snakemake this python.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export VIRTUAL_ENV := $(CURDIR)/$(VENV)

STAMP := $(VENV)/.installed-$(DEVICE)

.PHONY: setup run test lint format report verify clean

# What the linters and formatters read (settings: pyproject.toml).
PYTHON_SOURCES := miaflow scripts tests bench
WORKFLOW_SOURCES := Snakefile rules

setup: $(STAMP)

$(STAMP): envs/requirements.txt envs/requirements-nodeps.txt envs/torch-$(DEVICE).txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet -r envs/torch-$(DEVICE).txt -r envs/requirements.txt
	$(VENV)/bin/python -m pip install --quiet --no-deps -r envs/requirements-nodeps.txt
	$(VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.installed-*
	touch $@

# The whole workflow as one Snakemake DAG (one parse; a job starts when its own inputs exist),
# then dvc.lock records every stage as `dvc repro` would (miaflow.runtime.commit). The terminal
# shows the progress and the summary; the full log is records/make-run.log.
run: setup
	@started=$$(date +%s); \
	python -m miaflow.runtime.quiet records/make-run.log -- snakemake --cores all && \
	python -m miaflow.runtime.commit && echo && \
	python -m miaflow.tools.summary --started $$started

# Two pytest-xdist workers, each taking whole modules in tests/conftest.py's order (whole runs
# first; the shared run is built once); the 10 slowest tests and pytest's line with the total.
TEST_WORKERS ?= 2
test: lint
	python -m pytest -p no:cacheprovider --durations=10 -n $(TEST_WORKERS) --dist loadfile \
		--no-loadscope-reorder

# ruff (lint and format) and snakefmt: fails on any finding; `make format` fixes what it can.
lint: setup
	ruff check $(PYTHON_SOURCES)
	ruff format --check $(PYTHON_SOURCES)
	snakefmt --check $(WORKFLOW_SOURCES)

format: setup
	ruff check --fix $(PYTHON_SOURCES)
	ruff format $(PYTHON_SOURCES)
	snakefmt $(WORKFLOW_SOURCES)

# The HTML report of a finished run (`make run` first): report.html at the repository root.
report: setup
	snakemake --report report.html --report-stylesheet report/style.css

verify: setup
	python -m miaflow.runtime.verify

clean:
	rm -rf results records .snakemake
