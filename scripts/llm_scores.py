"""Snakemake adapter for rule llm_scores."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_scores", snakemake)
