"""Snakemake adapter for rule query_signals."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.query_signals(snakemake.input.data, snakemake.input.queries, snakemake.input.models,
                       snakemake.threads, snakemake.output[0])
