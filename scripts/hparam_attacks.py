"""Snakemake adapter for rule hparam_attacks."""

from miaflow.jobs import hparams
from miaflow.jobs.adapter import run

run(hparams.hparam_attacks, snakemake)
