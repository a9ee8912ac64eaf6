"""Snakemake adapter for rule hparam_noise."""

from miaflow.jobs import hparams
from miaflow.jobs.adapter import run

run(hparams.hparam_noise, snakemake)
