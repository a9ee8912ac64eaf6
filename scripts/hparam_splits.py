"""Snakemake adapter for rule hparam_splits."""

from miaflow.jobs import hparams
from miaflow.jobs.adapter import run

run(hparams.hparam_splits, snakemake)
