"""Snakemake adapter for rule download_dataset."""

from miaflow.jobs import prepare
from miaflow.jobs.adapter import run

run(prepare.download_dataset, snakemake)
