"""Snakemake adapter for rule hparam_search."""
from miaflow.jobs import hparams
from miaflow.jobs.adapter import run

run(hparams.hparam_search, snakemake)
