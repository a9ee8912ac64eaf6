"""Snakemake adapter for rule hsj_distances."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.hsj_distances(snakemake.input.data, snakemake.input.splits, snakemake.input.models,
                       snakemake.wildcards.dataset, snakemake.wildcards.arch,
                       snakemake.params.options, snakemake.params.seed, snakemake.threads,
                       snakemake.output[0])
