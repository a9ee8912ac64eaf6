"""Snakemake adapter for rule prepare_dataset."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.prepare.prepare_dataset", snakemake)
