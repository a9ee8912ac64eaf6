"""Snakemake adapter for rule collect_metrics."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.collect_metrics(snakemake.input.metrics, snakemake.output.metrics, snakemake.output.summary)
