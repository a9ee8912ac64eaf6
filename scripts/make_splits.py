"""Snakemake adapter for rule make_splits."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.make_splits(snakemake.input.data, snakemake.wildcards.dataset, snakemake.params.splits,
                     snakemake.params.seed, snakemake.output[0])
