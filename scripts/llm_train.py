"""Snakemake adapter for rule llm_train."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_train, snakemake)
