"""Snakemake adapter for rule hparam_splits."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.hparams.hparam_splits", snakemake)
