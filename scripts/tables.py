"""Snakemake adapter for rule tables."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.tables, snakemake)
