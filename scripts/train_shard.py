"""Snakemake adapter for rule train_shard."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.train_shard(snakemake.input.data, snakemake.input.splits, snakemake.params.model_ids,
                     snakemake.wildcards.dataset, snakemake.wildcards.arch, snakemake.params.arch,
                     snakemake.params.seed, snakemake.threads, snakemake.output.models,
                     snakemake.output.records, snakemake.output.signals)
