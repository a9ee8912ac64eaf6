"""Snakemake adapter for rule hparam_report."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.hparam_report, snakemake)
