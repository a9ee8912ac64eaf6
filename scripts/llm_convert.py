"""Snakemake adapter for rule llm_convert."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_convert", snakemake)
