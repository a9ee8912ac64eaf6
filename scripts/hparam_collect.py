"""Snakemake adapter for rule hparam_collect."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.hparams.hparam_collect", snakemake)
