"""Snakemake adapter for rule scaling_sweep."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.evaluate.scaling_sweep", snakemake)
