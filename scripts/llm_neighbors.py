"""Snakemake adapter for rule llm_neighbors."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_neighbors", snakemake)
