"""Snakemake adapter for rule train_shard."""

from miaflow.jobs.adapter import run

run("miaflow.jobs.train.train_shard", snakemake)
