"""Snakemake adapter for rules llm_statistics and llm_reference_statistics."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_statistics", snakemake)
