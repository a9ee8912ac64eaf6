"""Snakemake adapter for rule llm_setting_scores."""

from miaflow.jobs import llm
from miaflow.jobs.adapter import run

run(llm.llm_setting_scores, snakemake)
