"""Snakemake adapter for rule make_queries."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.make_queries(snakemake.input.data, snakemake.input.splits, snakemake.wildcards.dataset,
                      snakemake.params.neighbour, snakemake.params.augment, snakemake.params.seed,
                      snakemake.output[0])
