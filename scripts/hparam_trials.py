"""Snakemake adapter for rule hparam_trials."""

from miaflow.jobs import hparams
from miaflow.jobs.adapter import run

run(hparams.hparam_trials, snakemake)
