"""Snakemake adapter for rule paired_tests."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.paired_tests(snakemake.input.metrics, snakemake.params.metrics, snakemake.params.alpha,
                      snakemake.output[0])
