"""Snakemake adapter for rule hparam_splits."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.hparams.hparam_splits", snakemake)
