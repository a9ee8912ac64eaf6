"""Snakemake adapter for rule llm_convert."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.llm.llm_convert", snakemake)
