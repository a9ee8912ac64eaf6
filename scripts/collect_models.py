"""Snakemake adapter for rule collect_models."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.collect_models", snakemake)
