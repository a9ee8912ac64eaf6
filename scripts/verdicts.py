"""Snakemake adapter for rule verdicts."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.verdicts", snakemake)
