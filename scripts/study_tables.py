"""Snakemake adapter for rule study_tables."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.study_tables, snakemake)
