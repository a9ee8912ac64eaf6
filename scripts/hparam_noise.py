"""Snakemake adapter for rule hparam_noise."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.hparams.hparam_noise", snakemake)
