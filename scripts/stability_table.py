"""Snakemake adapter for rule stability_table."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.stability_table", snakemake)
