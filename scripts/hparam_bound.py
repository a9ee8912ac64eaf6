"""Snakemake adapter for rule hparam_bound."""

from miaflow.jobs import hparams
from miaflow.jobs.adapter import run

run(hparams.hparam_bound, snakemake)
