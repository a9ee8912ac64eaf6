"""Snakemake adapter for rule hparam_run."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.hparams.hparam_run", snakemake)
