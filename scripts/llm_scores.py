"""Snakemake adapter for rule llm_scores."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.llm.llm_scores", snakemake)
