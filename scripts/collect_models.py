"""Snakemake adapter for rule collect_models."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.report.collect_models", snakemake)
