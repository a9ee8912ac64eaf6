"""Snakemake adapter for rule collect_metrics."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.collect_metrics, snakemake)
