"""Snakemake adapter for rule defense_report."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.defense_report", snakemake)
