"""Snakemake adapter for rule llm_tokenizer."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_tokenizer", snakemake)
