"""Snakemake adapter for rule risk_score_report."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.risk_score_report", snakemake)
