"""Snakemake adapter for rule hparam_report."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.hparam_report", snakemake)
