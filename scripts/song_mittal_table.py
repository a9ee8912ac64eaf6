"""Snakemake adapter for rule song_mittal_table."""

from miaflow.runtime.adapter import run

run("miaflow.jobs.report.song_mittal_table", snakemake)
