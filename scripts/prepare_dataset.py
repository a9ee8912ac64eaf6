"""Snakemake adapter for rule prepare_dataset."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.prepare_dataset(snakemake.wildcards.dataset, snakemake.params.options,
                         snakemake.params.splits, snakemake.params.seed, snakemake.output.data,
                         snakemake.output.splits)
