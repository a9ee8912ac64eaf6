"""Snakemake adapter for rule cost_table."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.cost_table", snakemake)
