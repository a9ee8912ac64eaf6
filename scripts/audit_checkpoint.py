"""Snakemake adapter for rule audit_checkpoint."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.audit.audit_checkpoint", snakemake)
