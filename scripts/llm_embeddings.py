"""Snakemake adapter for rule llm_embeddings."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_embeddings", snakemake)
