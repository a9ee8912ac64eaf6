"""Snakemake adapter for rule hparam_run."""

from miaflow.jobs import hparams
from miaflow.jobs.adapter import run

run(hparams.hparam_run, snakemake)
