"""Snakemake adapter for rule cost_table."""
from pathlib import Path

from miaflow import jobs

with jobs.job_log(snakemake.log[0]):
    jobs.cost_table(snakemake.input.benchmarks, "results", Path(snakemake.output[0]).with_suffix(""))
