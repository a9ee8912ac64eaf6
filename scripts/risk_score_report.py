"""Snakemake adapter for rule risk_score_report."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.risk_score_report, snakemake)
