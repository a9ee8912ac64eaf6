"""Snakemake adapter for rule llm_traps."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_traps", snakemake)
