"""Snakemake adapter for rule llm_train."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_train", snakemake)
