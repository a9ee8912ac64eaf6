"""Snakemake adapter for rule download_dataset."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.prepare.download_dataset", snakemake)
