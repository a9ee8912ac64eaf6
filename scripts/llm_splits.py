"""Snakemake adapter for rule llm_splits."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_splits, snakemake)
