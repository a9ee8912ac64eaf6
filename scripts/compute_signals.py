"""Snakemake adapter for rule compute_signals."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.compute_signals(snakemake.input.data, snakemake.input.models, snakemake.threads,
                         snakemake.output[0])
