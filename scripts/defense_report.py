"""Snakemake adapter for rule defense_report."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.defense_report, snakemake)
