"""Snakemake adapter for rule study_tables."""
from pathlib import Path

from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.study_tables(snakemake.input.metrics, snakemake.input.models, snakemake.input.sweeps,
                      snakemake.input.scoring, Path(snakemake.output.families[0]).parent,
                      [tuple(e) for e in snakemake.params.experiments], snakemake.output.gap,
                      snakemake.output.sweeps)
