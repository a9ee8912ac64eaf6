"""Snakemake adapter for rule hparam_grid."""

from miaflow.jobs import hparams
from miaflow.jobs.adapter import run

run(hparams.hparam_grid, snakemake)
