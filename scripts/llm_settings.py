"""Snakemake adapter for rule llm_settings."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_settings, snakemake)
