"""Snakemake adapter for rule audit_outputs."""

from miaflow.jobs import audit
from miaflow.jobs.adapter import run

run(audit.audit_outputs, snakemake)
