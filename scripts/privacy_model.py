"""Snakemake adapter for rule privacy_model."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.privacy.privacy_model", snakemake)
