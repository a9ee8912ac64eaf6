"""Snakemake adapter for rule published_table."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.published_table, snakemake)
