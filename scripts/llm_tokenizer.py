"""Snakemake adapter for rule llm_tokenizer."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.llm.llm_tokenizer", snakemake)
