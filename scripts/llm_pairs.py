"""Snakemake adapter for rule llm_pairs."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_pairs", snakemake)
