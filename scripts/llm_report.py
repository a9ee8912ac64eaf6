"""Snakemake adapter for rule llm_report."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.llm_report", snakemake)
