"""Snakemake adapter for rule train_shard."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.train.train_shard", snakemake)
