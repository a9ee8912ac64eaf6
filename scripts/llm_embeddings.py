"""Snakemake adapter for rule llm_embeddings."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_embeddings, snakemake)
