"""Snakemake adapter for rule hparam_run."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.hparams.hparam_run", snakemake)
