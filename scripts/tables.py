"""Snakemake adapter for rule tables."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.tables", snakemake)
