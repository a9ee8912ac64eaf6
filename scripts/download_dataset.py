"""Snakemake adapter for rule download_dataset."""
from miaflow import data, jobs

with jobs.job_log(snakemake.log[0]):
    data.download_source(snakemake.wildcards.dataset, snakemake.params.options,
                         snakemake.wildcards.filename, snakemake.output[0])
