"""Snakemake adapter for rule llm_scores."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_scores, snakemake)
