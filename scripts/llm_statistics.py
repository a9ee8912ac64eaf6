"""Snakemake adapter for rules llm_statistics and llm_reference_statistics."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.llm.llm_statistics", snakemake)
