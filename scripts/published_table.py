"""Snakemake adapter for rule published_table."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.published_table", snakemake)
