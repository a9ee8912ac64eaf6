"""Snakemake adapter for rule llm_neighbors."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_neighbors, snakemake)
