"""Snakemake adapter for rule hsj_distances."""
from miaflow.jobs import queries
from miaflow.jobs.adapter import run

run(queries.hsj_distances, snakemake)
