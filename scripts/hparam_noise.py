"""Snakemake adapter for rule hparam_noise."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.hparams.hparam_noise", snakemake)
