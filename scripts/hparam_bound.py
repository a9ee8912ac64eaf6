"""Snakemake adapter for rule hparam_bound."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.hparams.hparam_bound", snakemake)
