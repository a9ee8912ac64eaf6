"""Snakemake adapter for rule collect_models."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.collect_models, snakemake)
