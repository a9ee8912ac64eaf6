"""Snakemake adapter for rule train_shard."""

from miaflow.jobs import train
from miaflow.jobs.adapter import run

run(train.train_shard, snakemake)
