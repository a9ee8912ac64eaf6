"""Snakemake adapter for rule audit_outputs."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.audit.audit_outputs", snakemake)
