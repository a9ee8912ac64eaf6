"""Snakemake adapter for rule llm_splits."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_splits", snakemake)
