# miaflow: two commands. `make run` sets up and runs the embedded default; `make test` sets up and tests.
PYTHON ?= python3.11
VENV   ?= .venv
DEVICE ?= cpu
# Run inside the virtual environment, so that dvc calls this snakemake and snakemake this python.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export VIRTUAL_ENV := $(CURDIR)/$(VENV)

STAMP := $(VENV)/.installed-$(DEVICE)

.PHONY: setup run test verify clean

setup: $(STAMP)

$(STAMP): envs/requirements.txt envs/requirements-nodeps.txt envs/torch-$(DEVICE).txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet -r envs/torch-$(DEVICE).txt -r envs/requirements.txt
	$(VENV)/bin/python -m pip install --quiet --no-deps -r envs/requirements-nodeps.txt
	$(VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.installed-*
	touch $@

run: setup
	dvc repro
	@echo
	@cat results/tables/auroc.md
	@echo
	@echo "All metrics: results/metrics.parquet (long format); summary for DVC: results/summary.json"
	@echo "Tables (csv, md, tex): results/tables/   Figures: results/figures/"
	@echo "Statistical tests: results/tables/tests.md   Cost per stage: records/report/cost.md"

test: setup
	python -m pytest -p no:cacheprovider

verify: setup
	python -m miaflow.workflow.verify

clean:
	rm -rf results records .snakemake
