"""Snakemake adapter for rule study_tables."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.report.study_tables", snakemake)
