"""Snakemake adapter for rule download_dataset."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.prepare.download_dataset", snakemake)
