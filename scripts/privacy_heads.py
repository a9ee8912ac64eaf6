"""Snakemake adapter for rule privacy_heads."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.privacy.privacy_heads", snakemake)
