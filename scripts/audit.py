"""Snakemake adapter for rule audit."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.audit.audit", snakemake)
