"""Snakemake adapter for rule hparam_collect."""

from miaflow.jobs import hparams
from miaflow.jobs.adapter import run

run(hparams.hparam_collect, snakemake)
