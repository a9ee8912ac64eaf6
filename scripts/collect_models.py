"""Snakemake adapter for rule collect_models."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.collect_models(snakemake.input.records, snakemake.output[0])
