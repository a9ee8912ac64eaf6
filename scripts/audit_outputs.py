"""Snakemake adapter for rule audit_outputs."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.audit.audit_outputs", snakemake)
