"""Snakemake adapter for rule collect_metrics."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.report.collect_metrics", snakemake)
