"""Snakemake adapter for rule score_audit."""

from miaflow.jobs import audit
from miaflow.jobs.adapter import run

run(audit.score_audit, snakemake)
