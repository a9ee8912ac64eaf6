"""Snakemake adapter for rule llm_tokens."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_tokens, snakemake)
