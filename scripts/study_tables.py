"""Snakemake adapter for rule study_tables."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.study_tables", snakemake)
