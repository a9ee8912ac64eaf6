"""Snakemake adapter for rule hparam_features."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.hparams.hparam_features", snakemake)
