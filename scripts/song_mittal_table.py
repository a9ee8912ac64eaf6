"""Snakemake adapter for rule song_mittal_table."""

from miaflow.jobs import report
from miaflow.jobs.adapter import run

run(report.song_mittal_table, snakemake)
