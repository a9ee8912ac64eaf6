"""Snakemake adapter for rule llm_embeddings."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.llm.llm_embeddings", snakemake)
