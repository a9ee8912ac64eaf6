"""Snakemake adapter for rule cost_table."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.cost_table, snakemake)
