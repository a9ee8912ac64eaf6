"""Snakemake adapter for rule reference_sweep."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.reference_sweep(snakemake.input.splits, snakemake.input.signals,
                         snakemake.input.reference_signals, snakemake.params.attacks,
                         snakemake.params.counts, snakemake.params.options,
                         snakemake.wildcards.dataset, snakemake.wildcards.arch,
                         snakemake.params.seed, snakemake.output[0])
