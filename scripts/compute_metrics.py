"""Snakemake adapter for rule compute_metrics."""
from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.compute_metrics(snakemake.input.scores, snakemake.params.fpr_levels,
                         snakemake.params.confidence, snakemake.output.metrics, snakemake.output.roc)
