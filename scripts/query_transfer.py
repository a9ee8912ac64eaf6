"""Snakemake adapter for rule query_transfer."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.query_transfer(snakemake.input.data, snakemake.input.splits, snakemake.input.signals,
                        snakemake.wildcards.arch, snakemake.params.arch, snakemake.params.options,
                        snakemake.params.seed, snakemake.threads, snakemake.output[0])
