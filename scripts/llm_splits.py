"""Snakemake adapter for rule llm_splits."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.llm.llm_splits", snakemake)
