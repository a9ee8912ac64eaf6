"""Snakemake adapter for rule llm_pairs."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_pairs, snakemake)
