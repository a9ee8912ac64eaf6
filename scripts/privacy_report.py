"""Snakemake adapter for rule privacy_report."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.privacy_report", snakemake)
