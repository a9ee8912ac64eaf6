"""Snakemake adapter for rule llm_separability."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_separability", snakemake)
