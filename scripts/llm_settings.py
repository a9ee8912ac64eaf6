"""Snakemake adapter for rule llm_settings."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_settings", snakemake)
