"""Snakemake adapter for rule audit."""

from miaflow.jobs import audit
from miaflow.jobs.adapter import run

run(audit.audit, snakemake)
