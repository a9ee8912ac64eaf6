"""Snakemake adapter for rule llm_recall."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_recall, snakemake)
