"""Snakemake adapter for rule llm_tokenizer."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_tokenizer, snakemake)
