"""Snakemake adapter for rule prepare_dataset."""

from miaflow.jobs import prepare
from miaflow.jobs.adapter import run

run(prepare.prepare_dataset, snakemake)
