"""Snakemake adapter for rule song_mittal_table."""
from pathlib import Path

from miaflow import jobs, tables

with jobs.job_log(snakemake.log[0]):
    tables.write_song_mittal_table(snakemake.input.scores, Path(snakemake.output[0]).with_suffix(""))
