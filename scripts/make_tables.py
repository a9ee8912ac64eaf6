"""Snakemake adapter for rule tables."""
from pathlib import Path

from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    figures = {Path(p).stem.removeprefix("roc-").replace("-", "/", 1): p for p in snakemake.output.figures}
    jobs.make_tables(snakemake.input.metrics, snakemake.input.tests, snakemake.input.models,
                     Path(snakemake.output.auroc[0]).parent, figures, snakemake.input.roc)
