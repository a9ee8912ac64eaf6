"""Snakemake adapter for rule llm_convert."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_convert, snakemake)
