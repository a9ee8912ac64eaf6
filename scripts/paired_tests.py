"""Snakemake adapter for rule paired_tests."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.report.paired_tests", snakemake)
