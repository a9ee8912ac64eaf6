"""Snakemake adapter for rule collect_metrics."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.collect_metrics", snakemake)
