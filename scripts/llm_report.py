"""Snakemake adapter for rule llm_report."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.llm_report, snakemake)
