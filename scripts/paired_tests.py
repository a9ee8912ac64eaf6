"""Snakemake adapter for rule paired_tests."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.paired_tests, snakemake)
