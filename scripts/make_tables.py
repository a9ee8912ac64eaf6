"""Snakemake adapter for rule tables."""
from pathlib import Path

from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.make_tables(snakemake.input.metrics, snakemake.input.tests, snakemake.input.models,
                     Path(snakemake.output.auroc[0]).parent,
                     dict(zip(map(tuple, snakemake.params.experiments), snakemake.output.figures)),
                     snakemake.input.roc)
