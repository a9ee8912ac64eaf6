"""Snakemake adapter for rule llm_dataset_inference."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.llm.llm_dataset_inference", snakemake)
