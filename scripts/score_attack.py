"""Snakemake adapter for rule score_attack."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.score_attack(snakemake.input.splits, snakemake.input.signals,
                      snakemake.input.reference_signals, snakemake.wildcards.attack,
                      snakemake.params.options, snakemake.wildcards.dataset, snakemake.wildcards.arch,
                      snakemake.params.seed, snakemake.output[0],
                      dict(zip(snakemake.params.artifact_names, snakemake.input.artifacts)))
