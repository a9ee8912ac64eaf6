"""Snakemake adapter for rule audit_checkpoint."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.audit.audit_checkpoint", snakemake)
