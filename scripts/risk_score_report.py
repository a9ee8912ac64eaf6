"""Snakemake adapter for rule risk_score_report."""
from pathlib import Path

from miaflow import jobs, tables

with jobs.job_log(snakemake.log[0]):
    tables.write_risk_report(snakemake.input.scores, Path(snakemake.output.table[0]).with_suffix(""),
                             dict(zip(map(tuple, snakemake.params.experiments), snakemake.output.figures)))
