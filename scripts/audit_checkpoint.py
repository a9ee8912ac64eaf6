"""Snakemake adapter for rule audit_checkpoint."""

from miaflow.jobs import audit
from miaflow.jobs.adapter import run

run(audit.audit_checkpoint, snakemake)
