"""Snakemake adapter for rule llm_setting_scores."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_setting_scores", snakemake)
