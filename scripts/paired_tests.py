"""Snakemake adapter for rule paired_tests."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.paired_tests", snakemake)
