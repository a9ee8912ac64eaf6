"""Snakemake adapter for rule privacy_claim."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.privacy.privacy_claim", snakemake)
