"""Snakemake adapter for rule hparam_collect."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.hparams.hparam_collect", snakemake)
