"""Snakemake adapter for rule scaling_sweep."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.scaling_sweep(snakemake.input.splits, snakemake.input.signals,
                       snakemake.input.reference_signals, snakemake.params.reference_attacks,
                       snakemake.params.reference_counts, snakemake.params.query_attacks,
                       snakemake.input.artifacts, snakemake.params.artifact_names,
                       snakemake.params.options, snakemake.wildcards.dataset,
                       snakemake.wildcards.arch, snakemake.params.seed, snakemake.output[0])
