"""Snakemake adapter for rules llm_statistics and llm_reference_statistics."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_statistics, snakemake)
