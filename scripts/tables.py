"""Snakemake adapter for rule tables."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.report.tables", snakemake)
