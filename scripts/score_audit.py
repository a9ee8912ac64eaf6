"""Snakemake adapter for rule score_audit."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.audit.score_audit", snakemake)
