"""Snakemake adapter for rule audit."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.audit.audit", snakemake)
