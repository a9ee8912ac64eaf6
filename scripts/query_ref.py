"""Snakemake adapter for rule query_ref."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.query_ref(snakemake.input.data, snakemake.input.splits, snakemake.input.models,
                   snakemake.wildcards.arch, snakemake.params.options, snakemake.params.seed,
                   snakemake.threads, snakemake.output[0])
