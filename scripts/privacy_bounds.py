"""Snakemake adapter for rule privacy_bounds."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.privacy.privacy_bounds", snakemake)
