"""Snakemake adapter for rule hparam_features."""

from miaflow.jobs import hparams
from miaflow.jobs.adapter import run

run(hparams.hparam_features, snakemake)
