"""Snakemake adapter for rule score_attacks."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.score_attacks(snakemake.input.splits, snakemake.input.signals,
                       snakemake.input.reference_signals, snakemake.params.attacks,
                       snakemake.params.options, snakemake.wildcards.dataset,
                       snakemake.wildcards.arch, snakemake.params.seed, snakemake.input.artifacts,
                       snakemake.params.artifact_names, snakemake.output.scores,
                       snakemake.output.timings, metrics_out=snakemake.output.metrics,
                       roc_out=snakemake.output.roc, fpr_levels=snakemake.params.fpr_levels,
                       confidence=snakemake.params.confidence)
